/* test_parse.c: the decimal numbers of LOCKSTEP_* variables (parse.h): what strtol and strtod take
 * beside decimal digits (a space, a sign, hex, inf, nan) is refused, not read as another number. */
#include <math.h>

#include "parse.h"
#include "testutil.h"

int main(void) {
    long long n = -1;
    LS_EXPECT(ls_parse_count("0", 10, &n) && n == 0);
    LS_EXPECT(ls_parse_count("64", 64, &n) && n == 64);
    LS_EXPECT(ls_parse_count("9223372036854775807", 9223372036854775807LL, &n) && n == 9223372036854775807LL);
    n = -1;
    static const char *bad_counts[] = {
        "", " 5", "5 ", "+5", "-1", "0x10", "1e3", "5s", "1.0", "65", "99999999999999999999", "nan", "inf"};
    for (size_t i = 0; i < sizeof bad_counts / sizeof bad_counts[0]; i++) {
        if (ls_parse_count(bad_counts[i], 64, &n)) printf("count '%s' was taken as %lld\n", bad_counts[i], n);
        LS_EXPECT(!ls_parse_count(bad_counts[i], 64, &n));
    }
    LS_EXPECT(n == -1 && !ls_parse_count(NULL, 64, &n));
    /* a max below 9: a first digit above it was taken ((max - digit) / 10 rounded up to 0) */
    LS_EXPECT(!ls_parse_count("5", 3, &n) && !ls_parse_count("1", 0, &n) && !ls_parse_count("13", 3, &n));
    LS_EXPECT(n == -1 && ls_parse_count("3", 3, &n) && n == 3 && ls_parse_count("0", 0, &n) && n == 0);

    double d = -1;
    LS_EXPECT(ls_parse_decimal("30", &d) && d == 30);
    LS_EXPECT(ls_parse_decimal("0.5", &d) && d == 0.5);
    LS_EXPECT(ls_parse_decimal(".5", &d) && d == 0.5);
    LS_EXPECT(ls_parse_decimal("2.", &d) && d == 2);
    LS_EXPECT(ls_parse_decimal("1e9", &d) && d == 1e9);
    LS_EXPECT(ls_parse_decimal("5E-1", &d) && d == 0.5);
    LS_EXPECT(ls_parse_decimal("0", &d) && d == 0);
    LS_EXPECT(ls_parse_decimal("0e-999", &d) && d == 0);
    LS_EXPECT(ls_parse_decimal("1e400", &d) && isinf(d)); /* past any range a caller checks */
    d = -1;
    static const char *bad[] = {"",    " 5", "5 ",    "+5", "-1",  "0x10", "0x.8",     "5s",     "1e3x", "1e",
                                "1e+", ".",  "1.2.3", "e5", "nan", "inf",  "infinity", "1e-400", "1,5",  "٣"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (ls_parse_decimal(bad[i], &d)) printf("decimal '%s' was taken as %g\n", bad[i], d);
        LS_EXPECT(!ls_parse_decimal(bad[i], &d));
    }
    LS_EXPECT(d == -1 && !ls_parse_decimal(NULL, &d));
    LS_TEST_END();
}
