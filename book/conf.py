"""Sphinx settings for the workbook as a book (`make book`, scripts/build_book.py).

scripts/build_book.py copies this folder into build/book/source next to the executed
notebooks, so the paths here are relative to that folder. Nothing is executed here
(``nb_execution_mode = "off"``): the build script runs the notebooks beforehand, in a
student's clean environment and two at a time, and keeps them for the next build.
"""

from docutils import nodes
from sphinx.writers.html5 import HTML5Translator

project = "The gradient workbook"
author = "The gradient workbook's authors"
copyright = "the gradient workbook's authors, MIT licence"  # noqa: A001  (Sphinx's name for it)
language = "en"

extensions = [
    "myst_nb",
    # MathJax from the site itself: the pages work offline, and no page asks a CDN for anything.
    "sphinx-mathjax-offline",
]
exclude_patterns = ["_build", "_notebooks", "**.ipynb_checkpoints"]

# -- MyST-NB -------------------------------------------------------------------
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "attrs_inline"]
myst_heading_anchors = 3
# Outputs as the notebook shows them; stderr never reaches a page (the build script refuses it).
nb_output_stderr = "remove"
nb_merge_streams = True
# Markdown a cell displays (notebook 00's table of versions) with tables, as JupyterLab shows it.
nb_render_markdown_format = "myst"

# -- The page ------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "The gradient workbook"
# A nabla; without an icon of its own every browser asks the host for /favicon.ico.
html_favicon = "_static/favicon.svg"
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_last_updated_fmt = None
html_show_sourcelink = False
# The pages are the notebooks; a second copy of each (with every figure again) only adds size.
html_copy_source = False
# Light unless the reader's system asks for dark (without it the theme logs an error on a first visit).
html_context = {"default_mode": "auto"}
html_theme_options = {
    "repository_url": "https://github.com/gradient-workbook/gradient-workbook",
    "repository_branch": "main",
    "use_repository_button": True,
    # Each chapter has its own Colab, Binder and download links, to the students' version
    # (the theme's would open the page's source, with the worked solutions).
    "use_download_button": False,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
}


class EnlargeableFigures(HTML5Translator):
    """Every figure is a link to itself at full size: on a phone, a tap opens a six-panel figure to read."""

    def visit_image(self, node):
        start = len(self.body)
        super().visit_image(node)  # which points node["uri"] at the page's copy, in _images/
        if self._enlargeable(node):
            link = f'<a class="book-enlarge" href="{self.attval(node["uri"])}" title="Open the figure at full size">'
            self.body.insert(start, link)

    def depart_image(self, node):
        super().depart_image(node)
        if self._enlargeable(node):
            self.body.append("</a>")

    @staticmethod
    def _enlargeable(node):
        uri = node["uri"]
        return uri.startswith("_images/") and uri.endswith(".png") and not isinstance(node.parent, nodes.reference)


def setup(app):
    # The theme builds its own translator on top of this one (pydata-sphinx-theme's setup_translators).
    app.set_translator("html", EnlargeableFigures)
