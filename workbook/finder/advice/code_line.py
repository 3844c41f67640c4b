"""Reading one line of your code: the calls on it, their arguments, and comparisons.

Introduced in 03_finding_gradient_killers.ipynb. :mod:`workbook.finder.advice.culprit` writes a
fix in terms of your own expressions ("Replace `ops.round(h)` with ..."), so it needs the
exact text of the call that made an op. A line may be part of a longer statement (a call
split over lines, an ``if``), so this reads it with bracket counting, not with ``ast``.
"""

import re
from dataclasses import dataclass, field

#: A name, possibly dotted (tf.math.round, ops.cast, self.embedding), followed by "(".
CALL_START = re.compile(r"(?<![\w.\]\)])((?:[A-Za-z_]\w*\.)*)([A-Za-z_]\w*)\s*\(")
OPENING, CLOSING = "([{", ")]}"
#: Top-level comparisons, longest first; the op's type for each.
COMPARISONS = ((">=", "GreaterEqual"), ("<=", "LessEqual"), (">", "Greater"), ("<", "Less"))
KEYWORD = re.compile(r"^\s*([A-Za-z_]\w*)\s*=(?!=)\s*")
SIMPLE = re.compile(r"[\w.]+(\[[^\[\]]*\])*")


@dataclass(frozen=True)
class Call:
    """One call on a line: its whole text, the name called, and its arguments' texts."""

    text: str
    callee: str
    start: int
    args: tuple = ()
    keywords: dict = field(default_factory=dict)

    @property
    def name(self):
        return self.callee.rsplit(".", 1)[-1]

    def argument(self, position, keyword):
        """The text of an argument given by position or by keyword, or None."""
        if keyword in self.keywords:
            return self.keywords[keyword]
        return self.args[position] if position < len(self.args) else None


def calls(code):
    """Every complete call on ``code``, in the order they start (outer calls before inner ones)."""
    found = []
    for match in CALL_START.finditer(code or ""):
        end = closing(code, match.end() - 1)
        if end is None:
            continue
        parts = split_top(code[match.end() : end], ",")
        args, keywords = [], {}
        for part in parts:
            keyword = KEYWORD.match(part)
            if keyword:
                keywords[keyword.group(1)] = part[keyword.end() :].strip()
            elif part.strip():
                args.append(part.strip())
        callee = match.group(1) + match.group(2)
        found.append(Call(code[match.start() : end + 1], callee, match.start(), tuple(args), keywords))
    return found


def named(code, names):
    """The calls on ``code`` whose last name is one of ``names``."""
    return [call for call in calls(code) if call.name in names]


def _scan(text, start=0):
    """(index, char, depth) of each character of ``text`` from ``start`` outside quotes.

    ``depth`` counts the brackets open at that character, a bracket it opens included and
    one it closes not.
    """
    depth, quote = 0, None
    for index in range(start, len(text)):
        char = text[index]
        if quote or char in "'\"":
            quote = None if char == quote else (quote or char)
            continue
        depth += (char in OPENING) - (char in CLOSING)
        yield index, char, depth


def closing(text, start):
    """The index of the bracket that closes the one at ``start``, or None."""
    return next((index for index, char, depth in _scan(text, start) if char in CLOSING and depth == 0), None)


def split_top(text, separator):
    """``text`` split at ``separator`` where it is outside brackets and strings."""
    parts, last = [], 0
    for index, char, depth in _scan(text):
        if depth == 0 and char not in CLOSING and text.startswith(separator, index) and index >= last:
            parts.append(text[last:index])
            last = index + len(separator)
    parts.append(text[last:])
    return parts


def comparison(text):
    """(left, op type, right) of a top-level comparison in ``text`` (a > b, a <= b), or None."""
    for symbol, op_type in COMPARISONS:
        parts = split_top(text.replace("->", "\0\0"), symbol)
        if len(parts) == 2 and not parts[1].startswith("=") and "=" not in parts[0][-1:]:
            return parts[0].strip().replace("\0\0", "->"), op_type, parts[1].strip().replace("\0\0", "->")
    return None


def wrap(expression):
    """``expression`` in parentheses unless it is a name, a number, a subscript or one whole call."""
    expression = expression.strip()
    if SIMPLE.fullmatch(expression):
        return expression
    called = SIMPLE.match(expression)  # a name or subscript, then one call: f(x), SURROGATES['a'](x)
    opens = called is not None and expression[called.end() : called.end() + 1] == "("
    if opens and closing(expression, called.end()) == len(expression) - 1:
        return expression
    return f"({expression})"
