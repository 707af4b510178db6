"""The README and the docs site link only to files of the repository (issue 43: a user's clone has
nothing beside it, such as ../shared, and the docs need no page of another project): every link, image,
autolink, HTML href/src and bare URL outside code names a file the repository has. Links between the
site's pages and their anchors are checked again by `mkdocs build --strict` (.ci/run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.markdown_docs import (
    SOURCE,
    doc_files,
    heading_anchors,
    leaves_repository,
    links,
    relative_paths,
)


def _outside(page: Path) -> list[str]:
    found = []
    text = page.read_text(encoding="utf-8")
    for link in [*links(text), *relative_paths(text)]:
        why = leaves_repository(link.target, page, SOURCE)
        if why or link.bare:
            found.append(f"{page.relative_to(SOURCE)}:{link.line}: {link.target} {why or 'is a bare URL'}")
    return found


def test_the_readme_and_every_docs_page_link_only_inside_the_repository() -> None:
    pages = doc_files()
    assert (SOURCE / "docs" / "index.md") in pages and len(pages) > 20  # (the site is there to check)
    assert [problem for page in pages for problem in _outside(page)] == []


def test_the_readme_links_into_the_docs() -> None:
    targets = {link.target for link in links((SOURCE / "README.md").read_text(encoding="utf-8"))}
    assert {"docs/quickstart.md", "docs/operators/index.md", "docs/engines/index.md"} <= targets


def test_the_readmes_anchors_name_headings_of_their_pages() -> None:
    """mkdocs build --strict checks the docs' anchors; the README is no page of the site, so here."""
    readme = SOURCE / "README.md"
    wrong = []
    for link in links(readme.read_text(encoding="utf-8")):
        path, _, anchor = link.target.partition("#")
        page = readme if not path else readme.parent / path
        if anchor and page.suffix == ".md" and anchor not in heading_anchors(page):
            wrong.append(f"README.md:{link.line}: {link.target}")
    assert wrong == []


def test_heading_anchors_are_made_as_github_and_mkdocs_make_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Two commands\n\n## Under a supervisor: systemd, Kubernetes\n\n```bash\n# not a heading\n```\n"
    )
    assert heading_anchors(page) == {"two-commands", "under-a-supervisor-systemd-kubernetes"}


@pytest.mark.parametrize(
    ("markdown", "target"),
    [
        ("see [the traces](../shared/data/traces/x.jsonl)", "../shared/data/traces/x.jsonl"),
        ("see [Mooncake](https://github.com/kvcache-ai/Mooncake)", "https://github.com/kvcache-ai/Mooncake"),
        ("![plot](//cdn.example/plot.png)", "//cdn.example/plot.png"),
        ("read <https://example.com/guide> first", "https://example.com/guide"),
        ('<a href="http://example.com/x">x</a>', "http://example.com/x"),
        ("[ref]: https://example.com/y", "https://example.com/y"),
        ("as described at https://example.com/z.", "https://example.com/z"),
        ("[setup](/etc/kvstore/cluster.secret)", "/etc/kvstore/cluster.secret"),
        ("[gone](docs/no-such-page.md)", "docs/no-such-page.md"),
    ],
)
def test_a_link_outside_the_repository_is_found(tmp_path: Path, markdown: str, target: str) -> None:
    page = SOURCE / "README.md"  # (judged as if it were written in the README)
    found = list(links(f"# A page\n\nSome text, then {markdown}\n"))
    assert [link.target for link in found] == [target]
    assert leaves_repository(found[0].target, page, SOURCE) is not None or found[0].bare


def test_a_path_going_up_out_of_the_repository_is_found() -> None:
    """As the README once said: See `../shared/VISION.md` for the whole map."""
    found = list(relative_paths("leases, eviction and checksums. See `../shared/VISION.md` for the map.\n"))
    assert [link.target for link in found] == ["../shared/VISION.md"]
    assert leaves_repository(found[0].target, SOURCE / "README.md", SOURCE) == "leaves the repository"
    assert list(relative_paths("the segment is `/dev/shm/kvstore-<uid>/x.mem`, `kvstore ../x`\n")) == []


def test_links_in_code_and_links_inside_the_repository_pass() -> None:
    markdown = (
        "Run `curl -s http://127.0.0.1:9100/health` or\n\n```bash\ncurl -s https://example.com/x\n```\n\n"
        "then read [the quickstart](docs/quickstart.md#install), [bench](bench/README.md)\n"
        "and [above](#top).\n"
    )
    found = list(links(markdown))
    assert [link.target for link in found] == ["docs/quickstart.md#install", "bench/README.md", "#top"]
    assert [leaves_repository(link.target, SOURCE / "README.md", SOURCE) for link in found] == [None] * 3
