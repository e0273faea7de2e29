#!/usr/bin/env python3
"""compare_runs.py A B TOL: two training runs of an example program, from the files it wrote in the
current directory (A.loss from --log-steps: "step loss" per line; A.bin from --dump-params: raw
little-endian f32), agree: the same number of steps and parameters, and every loss and parameter
of A within relative TOL of B's (a parameter relative to the largest of B's), or bitwise equal for
TOL 0 (-0.0 is not 0.0 then; the same NaN is equal). Prints the worst difference; exits 1 naming
the first that is too far."""
import struct
import sys


def losses(name):
    return [float(line.split()[1]) for line in open(name + ".loss")]


def params(name):
    raw = open(name + ".bin", "rb").read()
    return struct.unpack("<%df" % (len(raw) // 4), raw)


def main():
    a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    worst = 0.0
    for what, x, y in (("loss", losses(a), losses(b)), ("parameter", params(a), params(b))):
        if len(x) != len(y) or not x:
            sys.exit("%s: %d %ss against %d in %s" % (a, len(x), what, len(y), b))
        if tol == 0:
            if struct.pack("<%dd" % len(x), *x) != struct.pack("<%dd" % len(y), *y):  # bits: -0.0 is not 0.0
                i = next(i for i in range(len(x)) if struct.pack("<d", x[i]) != struct.pack("<d", y[i]))
                sys.exit("%s %d: %r in %s against %r in %s (want bitwise equal)" % (what, i, x[i], a, y[i], b))
            continue
        scale = max(abs(v) for v in y) if what == "parameter" else 0.0
        for i, (u, v) in enumerate(zip(x, y)):
            d = abs(u - v) / max(abs(v), scale, 1e-30)
            if d != d or d > tol:
                sys.exit("%s %d: %r in %s against %r in %s (relative %.3g > %g)" % (what, i, u, a, v, b, d, tol))
            worst = max(worst, d)
    print("%s ~ %s: %s" % (a, b, "bitwise" if tol == 0 else "worst relative difference %.3g" % worst))


main()
