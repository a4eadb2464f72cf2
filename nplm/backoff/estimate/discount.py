"""Stage 3, discounting: modified Kneser-Ney discounts per order from the
counts-of-counts of the adjusted counts (Chen & Goodman 1998, eq. 26)."""
import numpy as np


class DiscountError(ValueError):
    """The counts-of-counts cannot support modified Kneser-Ney discounts."""


def order_discount(n, k, fallback, report):
    """Discounts of order k from its counts-of-counts n[0..4], in float32 like
    lmplz; the fallback replaces them when they cannot be computed."""
    problem = None
    for j in (1, 2, 3):
        if n[j] == 0:
            problem = (f"Could not calculate Kneser-Ney discounts for {k}-grams with adjusted "
                       f"count {j + 1} because we didn't observe any {k}-grams with adjusted "
                       f"count {j}; Is this small or artificial data?")
            break
    if problem is None:
        f32 = np.float32
        y = f32(n[1]) / f32(float(n[1]) + 2.0 * float(n[2]))
        out = [f32(0.0)]
        for j in (1, 2, 3):
            d = f32(j) - f32(j + 1) * y * f32(n[j + 1]) / f32(n[j])
            if d < 0.0 or d > j:
                problem = (f"ERROR: {k}-gram discount out of range for adjusted count {j}: "
                           f"{float(d):g}.  This means modified Kneser-Ney smoothing thinks "
                           f"something is weird about your data.")
                break
            out.append(d)
        if problem is None:
            return np.array(out, dtype=np.float32)
    if fallback is None:
        raise DiscountError(problem + "\nTry deduplicating the input.  To override this error "
                            "for e.g. a class-based model, rerun with --discount_fallback "
                            "(Python: discount_fallback=True).")
    report.notice(f"Substituting fallback discounts for order {k}: D1={float(fallback[1]):g} "
                  f"D2={float(fallback[2]):g} D3+={float(fallback[3]):g}")
    return fallback


def discounts(stats, config, report):
    """Every order's discounts from the (N, 7) statistics of ``adjust``, reported
    with the n-gram counts as lmplz does; returns (discounts, kept counts)."""
    order = config.order
    out = [order_discount(stats[k - 1, :5], k, config.fallback, report) for k in range(1, order + 1)]
    kept = [int(stats[k, 6]) for k in range(order)]
    report.say("Statistics:")
    for k in range(order):
        total = f"/{int(stats[k, 5])}" if stats[k, 5] != stats[k, 6] else ""
        d = out[k]
        report.say(f"{k + 1} {kept[k]}{total} D1={float(d[1]):g} D2={float(d[2]):g} D3+={float(d[3]):g}")
    return out, kept
