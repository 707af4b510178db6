"""Reading the README and the docs site's pages as a checker must: their fenced code blocks, their links,
and the `kvstore` command lines of their shell blocks. The tests that hold the docs to the repository and
to the code use it (test_docs_links_stay_in_the_repository, test_docs_commands_match_the_code)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(os.environ.get("KVSTORE_SOURCE_DIR", Path(__file__).resolve().parents[2]))

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
# [text](target "title") and ![alt](target); the target may be <wrapped in angle brackets>.
_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]*)")
_REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]*:[^>\s]*)>")
_HTML_ATTR = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
_BARE_URL = re.compile(r"\b(?:https?|ftp)://[^\s)>\]]+|\bwww\.[A-Za-z0-9-]+\.[^\s)>\]]+")
# A shell expansion stands for one word whatever it holds: $((...)), $(...), ${...}, $name.
_EXPANSION = re.compile(r"\$\(\([^)]*\)\)|\$\([^)]*\)|\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATORS = {"&&", "||", ";", "&", "|", "(", ")", ";;"}
_REDIRECTS = {"<", ">", ">>", "<<", ">&", "<&", "&>"}
_KEYWORDS = {"do", "then", "else", "time", "exec", "nohup", "sudo", "!"}
SHELL_LANGS = {"bash", "sh", "shell", "console"}


def doc_files() -> list[Path]:
    """The README and every page of the docs site, in a stable order."""
    return [SOURCE / "README.md", *sorted((SOURCE / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class CodeBlock:
    lang: str
    body: str
    line: int  # of its first line of code, 1-based


def split_fences(text: str) -> tuple[list[CodeBlock], str]:
    """The fenced code blocks, and the text outside them (each block's lines blanked, so line numbers
    stay those of the file)."""
    blocks: list[CodeBlock] = []
    outside: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            outside.append(lines[i])
            i += 1
            continue
        indent, fence = len(opened["indent"]), opened["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].lstrip(" ").startswith(fence):
            line = lines[j]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])  # (the fence's indent off)
            j += 1
        blocks.append(CodeBlock(opened["lang"].lower(), "\n".join(body), i + 2))
        outside.extend([""] * (j + 1 - i))
        i = j + 1
    return blocks, "\n".join(outside[: len(lines)])


def prose(text: str) -> str:
    """The text outside code blocks and code spans (spans blanked to spaces, newlines kept)."""
    _, outside = split_fences(text)
    return _CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), outside)


@dataclass(frozen=True)
class Link:
    target: str
    line: int
    bare: bool  # a URL written out in the text, which renderers such as GitHub's turn into a link


def links(text: str) -> Iterator[Link]:
    """Every link of a Markdown text outside its code: inline links and images, reference definitions,
    autolinks, HTML href/src, and bare URLs."""
    body = prose(text)

    def line_of(pos: int) -> int:
        return body.count("\n", 0, pos) + 1

    for pattern in (_INLINE_LINK, _REFERENCE_DEF, _AUTOLINK, _HTML_ATTR):
        for m in pattern.finditer(body):
            yield Link(m.group(1).strip("<>"), line_of(m.start()), bare=False)
    rest = body
    for pattern in (_INLINE_LINK, _REFERENCE_DEF, _AUTOLINK, _HTML_ATTR):  # (what is left is text)
        rest = pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), rest)
    for m in _BARE_URL.finditer(rest):
        yield Link(m.group(0).rstrip(".,;:!?'\""), line_of(m.start()), bare=True)


def relative_paths(text: str) -> Iterator[Link]:
    """Code spans of prose that name a file by a path relative to the page going up (`../x/y`): to a
    reader these point at a file as a link does."""
    _, outside = split_fences(text)
    for m in _CODE_SPAN.finditer(outside):
        word = m.group(0).strip("`").strip()
        if word.startswith("../") and not any(c.isspace() for c in word):
            yield Link(word, outside.count("\n", 0, m.start()) + 1, bare=False)


def leaves_repository(target: str, page: Path, root: Path) -> str | None:
    """Why a link's target is not a file of the repository (None when it is one)."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("//"):
        return "links outside the repository"
    path = target.split("#", 1)[0].split("?", 1)[0]
    if not path:
        return None  # an anchor on the same page
    if path.startswith("/"):
        return "is an absolute path (it names a file of the reader's machine, not of the repository)"
    where = (page.parent / path).resolve()
    if not where.is_relative_to(root.resolve()):
        return "leaves the repository"
    if not where.exists():
        return "names a file the repository does not have"
    return None


def heading_anchors(page: Path) -> set[str]:
    """The anchors a Markdown page's headings get, as GitHub and MkDocs make them (lowercase; what is not
    a letter, digit, space, '-' or '_' dropped; spaces to '-')."""
    _, outside = split_fences(page.read_text(encoding="utf-8"))
    titles = re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", outside, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in titles}


@dataclass(frozen=True)
class Command:
    argv: list[str]  # from "kvstore" on, its arguments only
    line: int


def _logical_lines(body: str, first_line: int) -> Iterator[tuple[str, int]]:
    """A shell block's commands: lines joined where a backslash continues one or a quote is still open."""
    pending, start = "", first_line
    for n, raw in enumerate(body.split("\n"), first_line):
        if not pending:
            start = n
        pending = f"{pending}\n{raw}" if pending else raw
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            shlex.split(_EXPANSION.sub("1", pending), comments=True)
        except ValueError:  # a quote opened on this line closes on a later one
            continue
        yield pending, start
        pending = ""
    if pending:
        yield pending, start


def _words(line: str) -> list[str]:
    lexer = shlex.shlex(_EXPANSION.sub("1", line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def kvstore_commands(block: CodeBlock) -> Iterator[Command]:
    """Each `kvstore ...` invocation of a shell block, without its redirections and what follows it."""
    for line, number in _logical_lines(block.body, block.line):
        words = _words(line)
        start = 0
        while start < len(words):
            end = next((k for k in range(start, len(words)) if words[k] in _SEPARATORS), len(words))
            yield from _command(words[start:end], number)
            start = end + 1


def _command(words: list[str], line: int) -> Iterator[Command]:
    while words and (words[0] in _KEYWORDS or _ASSIGNMENT.match(words[0])):
        words = words[1:]
    if not words or words[0] != "kvstore":
        return
    argv: list[str] = []
    skip = False
    for word in words[1:]:
        if skip:
            skip = False
        elif word in _REDIRECTS:
            skip = True  # the redirection's file goes with it
        else:
            argv.append(word)
    yield Command(argv, line)
