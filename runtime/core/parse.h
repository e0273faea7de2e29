/* parse.h: the numbers of LOCKSTEP_* variables, read the same way by every module: decimal digits
 * only. strtol and strtod also take a leading space or '+', hexadecimal ("0x10" was 16) and "inf"
 * or "nan"; such a value is refused here instead of being read as another number. Each returns 1
 * with *out set, or 0; the caller names the variable and what it expects. */
#ifndef LOCKSTEP_PARSE_H
#define LOCKSTEP_PARSE_H

/* A whole number from 0 to max: digits only (no sign, space, '.' or exponent). */
int ls_parse_count(const char *s, long long max, long long *out);

/* A number >= 0: digits with at most one '.' ("30", "0.5", ".5"), then an optional exponent
 * ("1e9", "5e-1"); no sign, space, hex, inf or nan. A value too large for a double is HUGE_VAL
 * (past any range the caller checks); one too small to tell from 0 is refused (1e-400 seconds
 * read as 0, which waits forever). */
int ls_parse_decimal(const char *s, double *out);

#endif
