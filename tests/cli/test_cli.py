"""The command line: query / perplexity / build-binary, as KenLM's query reports."""

import kenlm
import numpy as np
import pytest

from helpers import DATA, REFERENCE, need_shared, read_lines, run_cli

ARPA = str(REFERENCE / "ptb5k.o3.arpa.xz") if REFERENCE.is_dir() else ""


def kenlm_summary(lines):
    c = kenlm.Config()
    c.show_progress = False
    m = kenlm.Model(ARPA, c)
    total = total_oov = 0.0
    tokens = oovs = 0
    for line in lines:
        for p, _, oov in m.full_scores(line):
            total += p
            tokens += 1
            if oov:
                total_oov += p
                oovs += 1
    return 10 ** (-total / tokens), 10 ** (-(total - total_oov) / (tokens - oovs)), oovs, tokens


def parse_summary(out):
    vals = dict(line.split(":\t") for line in out.strip().splitlines()[-4:])
    return (float(vals["Perplexity including OOVs"]), float(vals["Perplexity excluding OOVs"]),
            int(vals["OOVs"]), int(vals["Tokens"]))


def test_query_summary_matches_kenlm():
    need_shared()
    lines = read_lines(DATA / "ptb" / "ptb.valid.txt", unk_to="<unk>", limit=300)
    r = run_cli("query", ARPA, "-v", "summary", stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    ppl, ppl_ex, oovs, tokens = parse_summary(r.stdout)
    k = kenlm_summary(lines)
    assert oovs == k[2] > 0 and tokens == k[3]
    assert ppl == pytest.approx(k[0], rel=1e-6) and ppl_ex == pytest.approx(k[1], rel=1e-6)


def test_query_word_lines():
    need_shared()
    r = run_cli("query", ARPA, stdin="the company said\nzzqx\n")
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()[:2]
    items = first.split("\t")
    assert items[0].startswith("the=") and items[3].startswith("</s>=")
    assert items[-1].startswith("Total: ") and items[-1].endswith("OOV: 0")
    assert second.startswith("zzqx=0 1 ") and second.endswith("OOV: 1")
    c = kenlm.Config()
    c.show_progress = False
    km = kenlm.Model(ARPA, c)
    expect = [p for p, _, _ in km.full_scores("the company said")]
    got = [float(item.split(" ")[2]) for item in items[:4]]
    assert got == pytest.approx(expect, abs=1e-5)


def kenlm_number(x, float32):
    """x as KenLM's query prints it (util/float_to_string.cc: double-conversion's
    shortest digits of the float or double, plain decimals for exponents -6 to 20),
    from numpy's own shortest digits."""
    if x != x:
        return "NaN"
    sci = np.format_float_scientific(np.float32(x) if float32 else float(x), unique=True, trim="-")
    mantissa, exponent = sci.split("e")
    sign, digits = ("-", mantissa[1:]) if mantissa.startswith("-") else ("", mantissa)
    digits, e = digits.replace(".", ""), int(exponent)
    if not -6 <= e < 21:
        return sign + digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + f"e{e}"
    point = e + 1
    if point <= 0:
        return sign + "0." + "0" * -point + digits
    digits += "0" * max(0, point - len(digits))
    return sign + digits[:point] + ("." + digits[point:] if point < len(digits) else "")


def kenlm_query_output(lines, ids):
    """What KenLM's query writes to stdout for these lines (lm/ngram_query.hh), the
    scores from the kenlm module: float32 line totals, float64 corpus sums."""
    c = kenlm.Config()
    c.show_progress = False
    m = kenlm.Model(ARPA, c)
    out, corpus, corpus_oov, tokens, oovs = [], 0.0, 0.0, 0, 0
    for line in lines:
        words = line.split() + ["</s>"]
        total, line_oov = np.float32(0), 0
        for w, (p, n, oov) in zip(words, m.full_scores(line)):
            out.append(f"{w}={0 if oov else ids[w]} {n} {kenlm_number(p, True)}\t")
            total = np.float32(total + np.float32(p))
            corpus_oov += p if oov else 0.0
            line_oov += oov
        out.append(f"Total: {kenlm_number(total, True)} OOV: {line_oov}\n")
        corpus += float(total)
        tokens, oovs = tokens + len(words), oovs + line_oov
    ppl = 10.0 ** (-corpus / tokens) if tokens else float("nan")
    ppl_ex = 10.0 ** (-(corpus - corpus_oov) / (tokens - oovs)) if tokens else float("nan")
    out.append(f"Perplexity including OOVs:\t{kenlm_number(ppl, False)}\n"
               f"Perplexity excluding OOVs:\t{kenlm_number(ppl_ex, False)}\nOOVs:\t{oovs}\nTokens:\t{tokens}\n")
    return "".join(out)


def test_query_prints_kenlm_query_digits():
    """Every number as query prints it: shortest float32 digits for word scores and
    line totals (a float32 sum), shortest double digits for the perplexities (sums of
    those totals); .7g or .10g printing, or float64 totals, differ."""
    need_shared()
    import lzma
    with lzma.open(ARPA, "rt") as f:      # lmplz's unigram order is KenLM's ids (<unk> = 0)
        section = f.read().split("\\1-grams:\n")[1].split("\n\n")[0]
    ids = {row.split("\t")[1]: i for i, row in enumerate(section.splitlines())}
    lines = read_lines(DATA / "ptb" / "ptb.valid.txt", unk_to="<unk>", limit=200) + ["", "zzqx yyqx"]
    r = run_cli("query", ARPA, stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == kenlm_query_output(lines, ids)
    r = run_cli("query", ARPA, stdin="")
    assert r.stdout == kenlm_query_output([], ids) and "\tNaN\n" in r.stdout


def test_perplexity_and_build_binary(tmp_path):
    need_shared()
    text = tmp_path / "t.txt"
    lines = read_lines(REFERENCE / "ptb5k.txt", unk_to=None, limit=200)
    text.write_text("\n".join(lines) + "\n")
    binary = tmp_path / "m.nplm"
    r = run_cli("build-binary", ARPA, str(binary))
    assert r.returncode == 0, r.stderr
    a = run_cli("perplexity", ARPA, str(text))
    b = run_cli("perplexity", str(binary), str(text))
    assert a.returncode == 0 and b.returncode == 0
    assert a.stdout == b.stdout
    assert parse_summary(a.stdout)[0] == pytest.approx(kenlm_summary(lines)[0], rel=1e-6)


def test_cli_errors_are_messages_not_tracebacks(tmp_path):
    need_shared()
    r = run_cli("perplexity", str(tmp_path / "missing.arpa"), "-")
    assert r.returncode == 1 and "Cannot read model" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("build-binary", ARPA, ARPA)
    assert r.returncode == 1 and "refusing to overwrite" in r.stderr
    r = run_cli()
    assert r.returncode == 2 and "query" in r.stdout


# KenLM's query (lm/query_main.cc at the commit KENLM-API.md cites): -v summary|sentence|word
# each turn one output on and may be repeated; 2, 1 and 0 set all three (word+sentence+summary,
# sentence+summary, summary); no -v prints everything.  Word items end in a tab and only the
# Total line ends a line, so word output alone is one line with no newline.
@pytest.mark.parametrize("flags, word, line, summary", [
    ((), True, True, True),
    (("word",), True, False, False),
    (("sentence",), False, True, False),
    (("summary",), False, False, True),
    (("2",), True, True, True),
    (("1",), False, True, True),
    (("0",), False, False, True),
    (("word", "summary"), True, False, True),
    (("sentence", "summary"), False, True, True),
    (("0", "word"), True, False, True),
    (("word", "0"), False, False, True),
])
def test_query_verbosity_as_kenlm(reference_binaries, tmp_path, capsys, flags, word, line, summary):
    from nplm.cli.main import main
    text = tmp_path / "t.txt"
    text.write_text("the company said\nzzqx\n\n")
    model = reference_binaries["ptb5k.o3"]
    assert main(["query", model, "--text", str(text)]) == 0
    full = capsys.readouterr().out.splitlines(keepends=True)
    rows, tail = full[:3], "".join(full[3:])
    assert tail.startswith("Perplexity including OOVs:\t") and len(full) == 7
    cut = [r.index("Total: ") for r in rows]
    expect = "".join((r[:c] if word else "") + (r[c:] if line else "") for r, c in zip(rows, cut))
    expect += tail if summary else ""
    args = ["query", model, "--text", str(text)]
    for f in flags:
        args += ["-v", f]
    assert main(args) == 0
    assert capsys.readouterr().out == expect


def test_query_verbosity_rejects_other_levels(reference_binaries, capsys):
    from nplm.cli.main import main
    with pytest.raises(SystemExit) as e:
        main(["query", reference_binaries["ptb5k.o3"], "-v", "3"])
    assert e.value.code == 2 and "invalid choice: '3'" in capsys.readouterr().err
