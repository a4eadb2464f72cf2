"""Command lines parsed as KenLM's programs parse theirs with boost::program_options
(``parse_command_line`` in its default style), with boost's error texts, so that the
programs installed under KenLM's names accept and refuse exactly what KenLM's do.

The rules, each checked against KenLM's lmplz:

* ``--name``, ``--name=value``, ``--name value``; a long name may be shortened to any
  prefix that names one option ("option '--s' is ambiguous and matches ..." otherwise).
* ``-x``, ``-xVALUE``, ``-x VALUE``; switches group (``-hx`` is ``-h -x``).
* An option that needs a value takes the next word whatever it is (``-o --text`` sets
  the order to "--text"); further words of a multitoken option, and the optional word of
  an option with an implicit value, are taken only while they do not look like options
  (``-`` alone does not; ``--`` ends the options).
* Words that belong to no option (``-``, ``""``, ``foo``) are ignored.
* Options are parsed, then stored in order (a second ``-o`` fails, then a bad value),
  then the program checks its help, then required options are checked (``notify``).
"""

import os
import re

from nplm.cli.kenlm._program import OptionError


class Option:
    """One option: ``kind`` is "value" (one word), "switch" (bool_switch, none) or
    "multi" (multitoken, one or more); ``implicit`` makes the words optional (the value
    when none is given); ``convert`` checks and converts one word (ValueError refuses)."""

    def __init__(self, long, short=None, kind="value", convert=str, default=None, default_text=None,
                 implicit=None, implicit_text=None, required=False, help=""):
        self.long, self.short, self.kind, self.convert = long, short, kind, convert
        self.default, self.implicit, self.required, self.help = default, implicit, required, help
        self.default_text = default_text if default_text is not None or default is None else _text(default)
        self.implicit_text = implicit_text if implicit_text is not None or implicit is None else _text(implicit)

    @property
    def display(self):
        return f"--{self.long}" if self.long else f"-{self.short}"

    @property
    def min_tokens(self):
        return 0 if self.kind == "switch" or self.implicit is not None else 1

    @property
    def max_tokens(self):
        return {"switch": 0, "value": 1, "multi": 1 << 30}[self.kind]

    def first_column(self):
        name = f"-{self.short} [ --{self.long} ]" if self.short and self.long else self.display
        param = ""
        if self.kind != "switch":
            param = f"[=arg(={self.implicit_text})]" if self.implicit is not None else "arg"
            if self.default_text:
                param += f" (={self.default_text})"
        return f"  {name} {param}"


def _text(value):
    return "1" if value is True else "0" if value is False else str(value)


def _looks_like_option(word):
    return len(word) > 1 and word[0] == "-"


class Parser:
    """The options of one program and boost's parse, store and notify."""

    def __init__(self, caption, options):
        self.caption, self.options = caption, list(options)

    def _long(self, name, word):
        exact = [o for o in self.options if o.long == name]
        if exact:
            return exact[0]
        matches = sorted(o.long for o in self.options if o.long and o.long.startswith(name))
        if not matches:
            raise OptionError(f"unrecognised option '{word}'", "unknown_option")
        if len(matches) > 1:
            listed = ", ".join(f"'--{m}'" for m in matches[:-1]) + f", and '--{matches[-1]}'"
            raise OptionError(f"option '--{name}' is ambiguous and matches {listed}", "ambiguous_option")
        return next(o for o in self.options if o.long == matches[0])

    def _short(self, letter):
        return next((o for o in self.options if o.short == letter), None)

    def tokenize(self, argv):
        """[(option, [words])] in command-line order; words beyond options are dropped."""
        out, words, i = [], list(argv), 0
        while i < len(words):
            word = words[i]
            i += 1
            if word == "--":
                break
            if word.startswith("--") and len(word) > 2:
                name, eq, value = word[2:].partition("=")
                opt = self._long(name, word)
                if eq and not value:
                    raise OptionError(f"the argument for option '{opt.display}' should follow immediately "
                                      "after the equal sign", "invalid_command_line_syntax")
                i = self._take(out, opt, [value] if eq else [], words, i)
            elif _looks_like_option(word):
                i = self._shorts(out, word, words, i)
        return out

    def _shorts(self, out, word, words, i):
        rest = word[1:]
        while rest:
            opt = self._short(rest[0])
            if opt is None:
                raise OptionError(f"unrecognised option '{word}'", "unknown_option")
            rest = rest[1:]
            if opt.kind == "switch":
                out.append((opt, []))
                continue
            return self._take(out, opt, [rest] if rest else [], words, i)
        return i

    def _take(self, out, opt, given, words, i):
        if given and opt.max_tokens == 0:
            raise OptionError(f"option '{opt.display}' does not take any arguments", "invalid_command_line_syntax")
        values = list(given)
        if not values and opt.min_tokens > 0:
            if i >= len(words):
                raise OptionError(f"the required argument for option '{opt.display}' is missing",
                                  "invalid_command_line_syntax")
            values.append(words[i])
            i += 1
        while len(values) < opt.max_tokens and i < len(words) and not _looks_like_option(words[i]):
            values.append(words[i])
            i += 1
        out.append((opt, values))
        return i

    def store(self, argv):
        """{long name: value} of the options given; raises OptionError as boost's store."""
        given = {}
        for opt, words in self.tokenize(argv):
            if opt.long in given:
                raise OptionError(f"option '{opt.display}' cannot be specified more than once", "multiple_occurrences")
            given[opt.long] = self._value(opt, words)
        return given

    @staticmethod
    def _value(opt, words):
        if opt.kind == "switch":
            return True
        if not words:
            return opt.implicit
        try:
            if opt.kind == "multi":
                return [opt.convert(w) for w in words]
            return opt.convert(words[0])
        except ValueError as e:
            shown = f" ('{words[0]}')" if words[0] else ""
            extra = f". {e}" if str(e) else ""
            raise OptionError(f"the argument{shown} for option '{opt.display}' is invalid{extra}",
                              "invalid_option_value") from None

    def notify(self, given):
        """All options' values (defaults filled); a missing required option fails."""
        for opt in self.options:
            if opt.required and opt.long not in given:
                raise OptionError(f"the option '{opt.display}' is required but missing", "required_option")
        values = {o.long: (False if o.kind == "switch" else o.default) for o in self.options}
        values.update(given)
        return values

    def format(self):
        """The options as boost prints an options_description (80 columns)."""
        firsts = [o.first_column() for o in self.options]
        width = min(max([23] + [len(f) for f in firsts]), 39) + 1
        lines = [f"{self.caption}:"]
        for opt, first in zip(self.options, firsts):
            line = first
            if opt.help:
                line += "\n" + " " * width if len(first) >= width else " " * (width - len(first))
                line += _paragraph(opt.help, width, 79 - width)
            lines.append(line)
        return "\n".join(lines) + "\n"


def _paragraph(text, indent, length):
    """boost's format_paragraph: lines of at most ``length``, broken after a space in
    the line's second half, a single leading space dropped."""
    out, begin, first = [], 0, True
    while begin < len(text):
        if not first and text[begin] == " " and begin + 1 < len(text) and text[begin + 1] != " ":
            begin += 1
        first = False
        end = begin + min(len(text) - begin, length)
        if text[end - 1] != " " and end < len(text) and text[end] != " ":
            space = text.rfind(" ", begin, end) + 1
            if space > begin and end - space < length // 2:
                end = space
        out.append(text[begin:end])
        begin = end
    return ("\n" + " " * indent).join(out)


# --- value conversions as boost::lexical_cast does them -------------------------------

_BOOL = {"on": True, "yes": True, "1": True, "true": True, "off": False, "no": False, "0": False, "false": False}


def to_bool(word):
    """boost's bool validator (the message is appended to "is invalid")."""
    try:
        return _BOOL[word.lower()]
    except KeyError:
        raise ValueError("Valid choices are 'on|off', 'yes|no', '1|0' and 'true|false'") from None


def to_unsigned(bits=64):
    """lexical_cast to an unsigned integer: optional sign, digits; "-2" wraps."""
    def convert(word):
        if not re.fullmatch(r"[+-]?[0-9]+", word):
            raise ValueError("")
        value = int(word)
        if abs(value) >= 1 << bits:
            raise ValueError("")
        return value % (1 << bits)
    return convert


# --- util::ParseSize -----------------------------------------------------------------

def physical_memory():
    """util::GuessPhysicalMemory: bytes of physical memory, 0 where unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


_DOUBLE = re.compile(r"\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_INTEGER = re.compile(r"\s*([+-]?[0-9]+)")


def parse_size(arg):
    """Bytes from a memory size as KenLM's util::ParseSize reads it: a number read as a
    C++ stream reads one, then at most one unit character b K M G T P E Z Y (powers of
    1024; none means K) or % of physical memory.  KenLM reads the number as an integer
    when it holds a '.', so "1.5G" fails there and here.  ValueError carries KenLM's text."""
    m = (_INTEGER if "." in arg else _DOUBLE).match(arg)
    fail = f"Failed to parse {arg} into a memory size "
    if m is None:
        raise ValueError(fail + "for the leading number.")
    value = float(m.group(1)) if "." not in arg else int(m.group(1)) % (1 << 64)
    words = arg[m.end():].split()
    after = words[0] if words else ""
    if len(after) > 1:
        raise ValueError(fail + "because there are more than two characters after the number.")
    if len(words) > 1:
        raise ValueError(fail + f"because there was more cruft {words[1]} after the number.")
    after = after or "K"
    if after == "%":
        mem = physical_memory()
        if not mem:
            raise ValueError(fail + "because % was specified but the physical memory size could not be determined.")
        return int(float(value) * float(mem) / 100.0)
    units = "bKMGTPEZY"
    index = units.find("K" if after == "k" else after)
    if index < 0:
        raise ValueError(fail + f"the allowed suffixes are {units}%.")
    return int(value * 1024 ** index) % (1 << 64)


def default_temp_prefix():
    """util::DefaultTempDirectory: TMPDIR, TMP, TEMPDIR or TEMP (a folder gains a
    trailing '/'), else /tmp/."""
    for var in ("TMPDIR", "TMP", "TEMPDIR", "TEMP"):
        value = os.environ.get(var)
        if value:
            return normalize_temp_prefix(value)
    return "/tmp/"


def normalize_temp_prefix(base):
    """util::NormalizeTempPrefix: an existing folder gains a trailing '/'."""
    if base and not base.endswith("/") and os.path.isdir(base):
        return base + "/"
    return base
