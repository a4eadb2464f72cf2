"""The repository speaks of the software only: README, docs, comments, strings and test
names say what the code does, never how the project was organised while it was made
(numbered issues or targets, work sessions, rounds of work)."""
import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()

_ORDINAL = (r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
            r"twelfth|thirteenth|fourteenth|fifteenth|\d+(?:st|nd|rd|th)")
PHRASES = [
    re.compile(r"\bissues?\s*(?:no\.?\s*)?#?\d+", re.I),                  # issue 7, issue #7
    re.compile(r"(?<![\w&/])#\d+(?:'s)?\s+(?:target|goal|asks?|requirement)", re.I),   # "#5 target"
    re.compile(r"\bthe (?:issue|ticket|brief|task)(?:'s)? (?:asks|says|wants|requires|demands|"
               r"requests|target|goal)", re.I),
    re.compile(rf"\b(?:{_ORDINAL}|this|that|the previous|an earlier|earlier|a former|former|"
               r"the next|last|later|the same|every|each) (?:work )?sessions?(?:'s)?\b", re.I),
    re.compile(r"\bsessions?' (?:runs?|figures?|work|changes?)\b", re.I),
    re.compile(r"\brounds? of work\b", re.I),
    re.compile(rf"\b(?:{_ORDINAL}) round\b", re.I),
    re.compile(r"\bfiled by\b", re.I),
    re.compile(r"\b(?:of|in|by|from|for) the \w+ issue\b", re.I),       # "of the training issue"
    re.compile(r"\btask statement\b|\bwhen the task was set\b|\bother engineers\b", re.I),
]

TEXT_SUFFIXES = {".md", ".rst", ".txt", ".toml", ".cfg", ".sh", ".pyx", ".pxd", ".h", ".c"}
SKIP_DIRS = {".git", "build", "dist", "_build", "__pycache__", ".pytest_cache", "examples",
             ".hypothesis", "nplm.egg-info"}


def phrases_in(text):
    """The history phrases found in ``text``."""
    return [m.group(0) for p in PHRASES for m in p.finditer(text)]


def python_prose(source):
    """A Python file's comments, string literals and function/class names (names with
    their underscores read as spaces, so ``test_issue_7`` reads as "test issue 7")."""
    parts = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.COMMENT, tokenize.STRING):
                parts.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            parts.append(node.name.replace("_", " "))
    return "\n".join(parts)


def repository_files(root):
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS for part in rel.parts[:-1]) or not path.is_file():
            continue
        if path.resolve() == THIS:
            continue    # it spells the phrases out
        if path.suffix == ".py" or path.suffix in TEXT_SUFFIXES or path.name in ("run", "CHANGELOG"):
            yield path


def history_phrases(root):
    """(file, line, phrase) for every history phrase under ``root``."""
    found = []
    for path in repository_files(root):
        try:
            source = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        prose = python_prose(source) if path.suffix == ".py" else source
        for phrase in phrases_in(prose):
            line = next((i + 1 for i, text in enumerate(source.splitlines()) if phrase in text
                         or phrase.replace(" ", "_") in text), 0)
            found.append((str(path.relative_to(root)), line, phrase))
    return found


def test_repository_speaks_only_of_the_software():
    found = history_phrases(ROOT)
    assert not found, "words about how the project was made:\n" + "\n".join(
        f"  {f}:{line}: {phrase!r}" for f, line, phrase in found)


ADDED = [
    ("README.md", "\n\nThe issue asks for at most 130.\n"),
    ("README.md", "\n\nMeasured in the ninth session.\n"),
    ("docs/guide/x.md", "The #5 target is 3x.\n"),
    ("nplm/mod.py", "x = 1  # as issue 7 wanted\n"),
    ("nplm/mod.py", "def f():\n    \"\"\"Faster since this session.\"\"\"\n"),
    ("nplm/_k.pyx", "# kept from the last round of work\n"),
    ("tests/test_x.py", "def test_issue_12_regression():\n    pass\n"),
    ("tools/bench.py", "# figures of the fourth round\n"),
    ("nplm/recipes/r.py", "def f():\n    \"\"\"The configurations of the training issue.\"\"\"\n"),
    ("tools/b.py", "# measured when the task was set\n"),
]


@pytest.mark.parametrize("where,text", ADDED)
def test_an_added_history_phrase_is_found(tmp_path, where, text):
    (tmp_path / "README.md").write_text("# nplm\n\nA language model toolkit.\n")
    target = tmp_path / where
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text((target.read_text() if target.exists() else "") + text)
    found = history_phrases(tmp_path)
    assert [f for f, _, _ in found] == [where], found


@pytest.mark.parametrize("text", [
    '@pytest.fixture(scope="session")\ndef corpus():\n    pass\n',
    "# issue a warning, then round-trip the file; a round of EM per row\n",
    "# the tuned weights; GitHub issues are welcome\n",
    "x = '#5'  # hash bucket 5\n",
])
def test_ordinary_words_are_not_history(tmp_path, text):
    (tmp_path / "nplm").mkdir()
    (tmp_path / "nplm" / "mod.py").write_text(text)
    assert history_phrases(tmp_path) == []
