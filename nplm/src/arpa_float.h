/* float32 <-> decimal text, as ARPA files hold numbers: the reader's correctly
   rounded parser and the shortest round-tripping formatter that the ARPA writer,
   the query program and the n-best rescorer print scores with (like
   double-conversion's ToShortestSingle, which lmplz and query use).  Declared for
   Cython in nplm/_arpa_float.pxd; a header, not a module, so that printing a score
   imports nothing (the query program's start). */
#ifndef NPLM_ARPA_FLOAT_H
#define NPLM_ARPA_FLOAT_H
#include <locale.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What nplm_parse_float returns besides 0; the ARPA parser's own error codes
   (_arpa.pyx) follow these. */
enum { NPLM_ERR_FLOAT = 10,       /* malformed number */
       NPLM_ERR_NONFINITE = 11 }; /* a number that overflows float32 */

/* Powers of ten as doubles; entries up to 1e22 are exact. */
static const double nplm_p10[100] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31,
    1e32, 1e33, 1e34, 1e35, 1e36, 1e37, 1e38, 1e39, 1e40, 1e41, 1e42, 1e43, 1e44, 1e45, 1e46,
    1e47, 1e48, 1e49, 1e50, 1e51, 1e52, 1e53, 1e54, 1e55, 1e56, 1e57, 1e58, 1e59, 1e60, 1e61,
    1e62, 1e63, 1e64, 1e65, 1e66, 1e67, 1e68, 1e69, 1e70, 1e71, 1e72, 1e73, 1e74, 1e75, 1e76,
    1e77, 1e78, 1e79, 1e80, 1e81, 1e82, 1e83, 1e84, 1e85, 1e86, 1e87, 1e88, 1e89, 1e90, 1e91,
    1e92, 1e93, 1e94, 1e95, 1e96, 1e97, 1e98, 1e99};

static const char nplm_digit_pairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "4041424344454647484950515253545556575859606162636465666768697071727374757677787980"
    "81828384858687888990919293949596979899";

/* glibc's strtof_l is correctly rounded and independent of the process's
   LC_NUMERIC; the "C" locale it reads with is made when the module loads. */
static locale_t nplm_c_locale;

__attribute__((constructor)) static void nplm_arpa_float_init(void) {
    nplm_c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

static inline uint64_t nplm_f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

/* ------------------------------------------------------------------------- */
/* Parsing */

/* Correctly rounded decimal -> float32 through glibc for the rare hard cases. */
static int nplm_slow_float(const unsigned char *p, ptrdiff_t n, float *out) {
    char buf[512];
    char *end;
    if (n >= 512)
        return NPLM_ERR_FLOAT;
    memcpy(buf, p, (size_t)n);
    buf[n] = 0;
    *out = strtof_l(buf, &end, nplm_c_locale);
    if (end != buf + n)
        return NPLM_ERR_FLOAT;
    if (!isfinite(*out))
        return NPLM_ERR_NONFINITE;
    return 0;
}

/* mant * 10^e10 correctly rounded to float32 when that is cheap; -1 otherwise.

   One IEEE operation on exact doubles gives the correctly rounded double d.
   Rounding d to float32 is then exact too unless d sits exactly halfway between
   two floats (the only case where double rounding can go wrong) or is
   subnormal/huge as a float; those return -1 for the slow path. */
static inline int nplm_decimal_to_float(uint64_t mant, int e10, int neg, float *out) {
    double d;
    uint64_t bits;
    if (mant == 0) {
        *out = neg ? -0.0f : 0.0f;
        return 0;
    }
    if (mant >= ((uint64_t)1 << 53) || e10 < -22 || e10 > 22)
        return -1;
    if (e10 >= 0)
        d = (double)mant * nplm_p10[e10];
    else
        d = (double)mant / nplm_p10[-e10];
    if (d < 1.1754943508222875e-38 || d > 1e38)
        return -1;
    bits = nplm_f64_bits(d);
    if ((bits & (((uint64_t)1 << 29) - 1)) == ((uint64_t)1 << 28))
        return -1;
    *out = (float)(neg ? -d : d);
    return 0;
}

/* Parse [+-]digits[.digits][(e|E)[+-]digits] at p into *out (correctly rounded).

   Returns 0, NPLM_ERR_FLOAT (not a number; *endp at the offending byte) or
   NPLM_ERR_NONFINITE.  The caller checks what follows the number. */
static inline int nplm_parse_float(const unsigned char *p, const unsigned char **endp, float *out) {
    const unsigned char *s = p;
    int neg = 0;
    uint64_t mant = 0;
    int digits = 0, e10 = 0, ex = 0, exsign = 1, exdigits = 0;
    unsigned int d;
    if (s[0] == '-') {
        neg = 1;
        s++;
    } else if (s[0] == '+') {
        s++;
    }
    d = (unsigned int)(s[0] - '0');
    while (d < 10) {
        mant = mant * 10 + d;
        digits++;
        s++;
        d = (unsigned int)(s[0] - '0');
    }
    if (s[0] == '.') {
        s++;
        d = (unsigned int)(s[0] - '0');
        while (d < 10) {
            mant = mant * 10 + d;
            digits++;
            e10--;
            s++;
            d = (unsigned int)(s[0] - '0');
        }
    }
    if (digits == 0) {
        *endp = s;
        return NPLM_ERR_FLOAT;
    }
    if (s[0] == 'e' || s[0] == 'E') {
        s++;
        if (s[0] == '-') {
            exsign = -1;
            s++;
        } else if (s[0] == '+') {
            s++;
        }
        d = (unsigned int)(s[0] - '0');
        while (d < 10) {
            if (ex < 100000)
                ex = ex * 10 + (int)d;
            exdigits++;
            s++;
            d = (unsigned int)(s[0] - '0');
        }
        if (exdigits == 0) {
            *endp = s;
            return NPLM_ERR_FLOAT;
        }
        e10 += exsign * ex;
    }
    *endp = s;
    /* More than 19 digits may have overflowed mant (leading zeros included, so
       a long "0.000..." also takes the slow path; it is correct, only slower). */
    if (digits <= 19 && nplm_decimal_to_float(mant, e10, neg, out) == 0)
        return 0;
    return nplm_slow_float(p, s - p, out);
}

/* ------------------------------------------------------------------------- */
/* Formatting */

/* Does the decimal c * 10^q read back as target (positive)? */
static int nplm_roundtrips(uint64_t c, int q, float target) {
    float got;
    char buf[64];
    int n;
    if (nplm_decimal_to_float(c, q, 0, &got) != 0) {
        n = snprintf(buf, 64, "%llue%d", (unsigned long long)c, q);
        if (nplm_slow_float((const unsigned char *)buf, n, &got) == NPLM_ERR_FLOAT)
            return 0;
    }
    return got == target;
}

/* Keep c * 10^q in *best if it reads back as a and is nearer to a (= s * 10^q)
   than what is there; exact ties go to the even digit, as in double-conversion. */
static inline void nplm_consider(uint64_t c, int q, float a, double s, double *best_dist,
                                 uint64_t *best) {
    double dist;
    if (c == 0 || !nplm_roundtrips(c, q, a))
        return;
    dist = fabs((double)c - s);
    if (dist < *best_dist || (dist == *best_dist && c % 2 == 0)) {
        *best_dist = dist;
        *best = c;
    }
}

/* The p-significant-digit decimal nearest to a that reads back as a, if any.

   k estimates floor(log10(a)).  Scaling in double is not exact, so the
   neighbours of the scaled value s are tested by an exact round-trip check (the
   nearest round-tripping candidate on either side of a is one of floor(s),
   floor(s) + 1, or one further out when s is within rounding error of an
   integer). */
static inline int nplm_shortest_at(float a, int k, int p, uint64_t *best) {
    int q = k - p + 1;
    double s, lo, best_dist = 1e300;
    uint64_t c;
    if (q <= 0)
        s = -q < 100 ? (double)a * nplm_p10[-q] : 0.0;
    else
        s = (double)a / nplm_p10[q];
    lo = floor(s);
    c = (uint64_t)lo;
    *best = 0;
    nplm_consider(c, q, a, s, &best_dist, best);
    nplm_consider(c + 1, q, a, s, &best_dist, best);
    if (s - lo < 1e-6)
        nplm_consider(c - 1, q, a, s, &best_dist, best);
    if (lo + 1.0 - s < 1e-6)
        nplm_consider(c + 2, q, a, s, &best_dist, best);
    return *best != 0;
}

/* floor(log10(a)) for a > 0, give or take one near powers of ten (which the
   shortest search tolerates); cheaper than log10(). */
static inline int nplm_decimal_exponent(float a) {
    uint32_t bits;
    int e2, k;
    double t;
    memcpy(&bits, &a, 4);
    e2 = (int)((bits >> 23) & 0xff);
    e2 = e2 ? e2 - 127 : -127 - 22;     /* subnormals: rough is fine */
    k = (e2 * 78913) >> 18;             /* floor(e2 * log10(2)) */
    t = k <= 0 ? (double)a * nplm_p10[-k] : (double)a / nplm_p10[k];
    if (t >= 10.0)
        k++;
    return k;
}

/* Whether an integer lies in the rounding interval scaled by 10^-q (q <= 0);
   its first and last ones in *cl, *ch. */
static inline int nplm_interval_has(uint64_t lo4, uint64_t hi4, double unit, int even, int q,
                                    double *cl, double *ch) {
    double scale = nplm_p10[-q] * unit;
    double L = (double)lo4 * scale, H = (double)hi4 * scale;
    *cl = ceil(L);
    *ch = floor(H);
    if (!even) {
        if (*cl == L)
            *cl += 1.0;
        if (*ch == H)
            *ch -= 1.0;
    }
    return *cl <= *ch;
}

/* The shortest decimal c * 10^q that reads back as a (> 0, finite), nearest to
   a, ties to the even c, found from a's rounding interval in exact double
   arithmetic; 0 (nothing written) outside the range where that is exact
   (a below about 1e-4, subnormal, or from 2^53 up).

   a = m * 2^E; the decimals in (lo, hi), ends included when m is even, read back
   as a.  Scaled by 10^-q (q <= 0), 4m, lo and hi in units of 2^(E-2) are below
   2^26 and 10^-q = 5^-q * 2^-q with 5^-q < 2^26: every product fits a double's
   53 bits.  From q = 0 on, multiples of 10^q are sought among the integers of
   the q = 0 interval in integer arithmetic. */
static inline int nplm_shortest_exact(float a, uint64_t *cp, int *qp) {
    uint32_t bits;
    int e2, q;
    uint64_t m, lo4, hi4, step, first, last, c, best, fl;
    double unit, V, cl, ch, L, H, d, best_d;
    int even;
    memcpy(&bits, &a, 4);
    e2 = (int)((bits >> 23) & 0xff);
    if (e2 == 0 || e2 >= 127 + 53)
        return 0;
    m = (bits & 0x7fffff) | 0x800000;
    even = (m & 1) == 0;
    hi4 = 4 * m + 2;
    lo4 = (m == 0x800000 && e2 > 1) ? 4 * m - 1 : 4 * m - 2;
    unit = ldexp(1.0, e2 - 152);
    /* 7 significant digits first (the commonest), then up or down to the largest
       q whose interval holds an integer (every float32 has a 9-digit decimal). */
    q = (((e2 - 127) * 78913) >> 18) - 6;      /* floor(log10(a)) - 6, or one less */
    if (q > 0)
        q = 0;
    if (nplm_interval_has(lo4, hi4, unit, even, q, &cl, &ch)) {
        while (q < 0 && nplm_interval_has(lo4, hi4, unit, even, q + 1, &L, &H)) {
            q++;
            cl = L;
            ch = H;
        }
    } else {
        for (;;) {
            q--;
            if (q < -11)
                return 0;
            if (nplm_interval_has(lo4, hi4, unit, even, q, &cl, &ch))
                break;
        }
    }
    V = 4.0 * (double)m * unit * nplm_p10[-q];
    step = 1;
    if (q == 0) {
        while (((uint64_t)cl + step * 10 - 1) / (step * 10) * (step * 10) <= (uint64_t)ch) {
            step *= 10;
            q++;
        }
    }
    if (step == 1) {            /* the integer in [cl, ch] nearest to V, ties to the even one */
        fl = (uint64_t)floor(V);
        if ((double)fl < cl) {
            fl = (uint64_t)cl;
        } else if ((double)(fl + 1) <= ch) {
            d = ((double)(fl + 1) - V) - (V - (double)fl);   /* (its sign and zero are exact) */
            if (d < 0 || (d == 0 && fl % 2 == 1))
                fl++;
        }
        *cp = fl;
        *qp = q;
        return 1;
    }
    /* the multiple of step in [cl, ch] nearest to V, ties to the even one */
    first = ((uint64_t)cl + step - 1) / step;
    last = (uint64_t)ch / step;
    fl = (uint64_t)floor(V / (double)step);
    best = 0;
    best_d = 0.0;
    for (c = fl > 0 ? fl - 1 : 0; c < fl + 3; c++) {
        if (c < first || c > last)
            continue;
        d = fabs((double)(c * step) - V);
        if (best == 0 || d < best_d || (d == best_d && c % 2 == 0)) {
            best = c;
            best_d = d;
        }
    }
    *cp = best;
    *qp = q;
    return best != 0;
}

/* Write c * 10^q (c > 0) after the n bytes already in out, in double-conversion's
   layout; returns the length. */
static int nplm_write_decimal(uint64_t c, int q, char *out, int n) {
    int L, first, point, exponent;
    char digits[24];            /* c's digits in digits[first:24] */
    uint64_t r;
    while (c % 10 == 0) {
        c /= 10;
        q++;
    }
    first = 24;
    while (c >= 100) {
        r = c % 100;
        c /= 100;
        first -= 2;
        digits[first] = nplm_digit_pairs[2 * r];
        digits[first + 1] = nplm_digit_pairs[2 * r + 1];
    }
    if (c >= 10) {
        first -= 2;
        digits[first] = nplm_digit_pairs[2 * c];
        digits[first + 1] = nplm_digit_pairs[2 * c + 1];
    } else {
        first -= 1;
        digits[first] = (char)('0' + c);
    }
    L = 24 - first;
    point = L + q;              /* digits before the decimal point */
    exponent = point - 1;
    if (-6 <= exponent && exponent < 21) {
        if (point <= 0) {
            out[n] = '0';
            out[n + 1] = '.';
            n += 2;
            memset(out + n, '0', (size_t)-point);
            n += -point;
            memcpy(out + n, digits + first, (size_t)L);
            n += L;
        } else if (point >= L) {
            memcpy(out + n, digits + first, (size_t)L);
            n += L;
            memset(out + n, '0', (size_t)(point - L));
            n += point - L;
        } else {
            memcpy(out + n, digits + first, (size_t)point);
            out[n + point] = '.';
            memcpy(out + n + point + 1, digits + first + point, (size_t)(L - point));
            n += L + 1;
        }
    } else {
        out[n] = digits[first];
        n += 1;
        if (L > 1) {
            out[n] = '.';
            memcpy(out + n + 1, digits + first + 1, (size_t)(L - 1));
            n += L;
        }
        n += snprintf(out + n, 8, "e%d", exponent);
    }
    return n;
}

/* Write the shortest round-tripping decimal of v (finite) in double-conversion's
   ToShortestSingle style (NO_FLAGS, exponential outside 1e-6 <= |v| < 1e21,
   "-0" for negative zero, "-inf" for a log10 probability of zero, which KenLM
   reads back).  Returns the number of bytes written: at most 22 (a sign and 21
   digits, just below 1e21). */
static int nplm_format_float(float v, char *out) {
    int n = 0, k, p, q;
    uint64_t c = 0, t;
    float a = fabsf(v);
    if (isinf(v)) {
        memcpy(out, v < 0 ? "-inf" : "inf", v < 0 ? 4 : 3);
        return v < 0 ? 4 : 3;
    }
    if (v < 0 || (v == 0 && nplm_f64_bits((double)v) >> 63)) {
        out[0] = '-';
        n = 1;
    }
    if (a == 0) {
        out[n] = '0';
        return n + 1;
    }
    if (nplm_shortest_exact(a, &c, &q))
        return nplm_write_decimal(c, q, out, n);
    k = nplm_decimal_exponent(a);
    /* Most ARPA numbers have 7-8 significant digits: try 8 first, then walk down. */
    if (nplm_shortest_at(a, k, 8, &c)) {
        p = 8;
        t = c;
        while (p > 1 && nplm_shortest_at(a, k, p - 1, &t)) {
            p--;
            c = t;
        }
    } else {
        p = 9;
        while (p < 17 && !nplm_shortest_at(a, k, p, &c))
            p++;
    }
    return nplm_write_decimal(c, k - p + 1, out, n);
}
#endif
