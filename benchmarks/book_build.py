"""`make book`: how long the site takes to build, cold and cached, and how big it is.

Cold: every notebook executed at its classroom defaults, two at a time, in a fresh
build folder, then rendered. Cached: the same build again, where nothing changed, so
only Sphinx runs (what a rebuild after a change of wording costs, and what CI pays on
top of the test run, whose executed notebooks it reuses).
"""

import importlib.util
import pathlib
import resource
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("build_book", ROOT / "scripts" / "build_book.py")
build_book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_book)


def largest_page(html):
    pages = sorted(pathlib.Path(html).glob("*.html"), key=lambda p: p.stat().st_size)
    return pages[-1].name, pages[-1].stat().st_size


def folder_bytes(folder):
    return sum(p.stat().st_size for p in pathlib.Path(folder).rglob("*") if p.is_file())


def children_cpu_seconds():
    """CPU time of every finished child process so far: kernels, runners and Sphinx."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_build(folder):
    before = children_cpu_seconds()
    result = build_book.build(out=folder, jobs=2)
    result["cpu_seconds"] = children_cpu_seconds() - before
    return result


def main():
    with tempfile.TemporaryDirectory(prefix="book-bench-") as folder:
        cold = timed_build(folder)
        cached = timed_build(folder)
        page, page_bytes = largest_page(cached["html"])
        images, mathjax = folder_bytes(cached["html"] / "_images"), folder_bytes(cached["html"] / "_static" / "mathjax")
    rows = [
        "| build | executing (wall) | rendering (wall) | in all (wall) | CPU time |",
        "|---|---|---|---|---|",
        f"| cold: {len(cold['executed'])} notebooks at classroom defaults, 2 at a time | "
        f"{cold['executing_seconds']:.0f} s | {cold['rendering_seconds']:.0f} s | {cold['seconds']:.0f} s | "
        f"{cold['cpu_seconds']:.0f} s |",
        f"| cached: nothing changed ({len(cached['executed'])} executed) | {cached['executing_seconds']:.0f} s | "
        f"{cached['rendering_seconds']:.0f} s | {cached['seconds']:.0f} s | {cached['cpu_seconds']:.0f} s |",
    ]
    figures = sum(cold["figures"].values())
    return (
        "## The book (`make book`)\n\nscripts/build_book.py in a fresh build folder, then again with the executed "
        "notebooks cached; CPU time is that of its child processes (kernels, Sphinx), the figure to trust on a "
        "shared machine.\n\n"
        + "\n".join(rows)
        + f"\n\nThe site: {cold['bytes'] / 2**20:.1f} MiB in {cold['files']} files, {figures} figures in "
        f"{len(cold['figures'])} chapters ({images / 2**20:.1f} MiB of PNGs); MathJax, served from the site so "
        f"that it reads offline, is {mathjax / 2**20:.1f} MiB of that, of which a page loads only what it uses. "
        f"The largest page is {page} ({page_bytes / 2**10:.0f} KiB without its figures).\n"
    )


if __name__ == "__main__":
    print(main())
