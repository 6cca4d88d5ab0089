"""The documentation build fails on what it must catch (``make docs``: ``-W --keep-going``, nitpicky).

Each test builds a one-page Sphinx project in a temporary folder with the site's own settings
(``docs/conf.py``: the nitpick rules and the resolver that maps a re-exported name such as
``rieszflow.Ball`` to the page of the object it is) and checks the outcome: a page whose references
resolve builds; a reference to a name that does not exist fails the build and is named in the
output, also when it is written as a re-export or a bare name; a gallery script that raises fails
the build. Skipped where the ``docs`` extra (Sphinx) is not installed.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("numpydoc")

ROOT = Path(__file__).resolve().parent.parent

CONF = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("site_conf", {conf!r})
site = importlib.util.module_from_spec(spec)
spec.loader.exec_module(site)          # the site's settings (its setup() is not called)
extensions = ["sphinx.ext.autodoc", "numpydoc"] + {extra!r}
nitpicky = True
nitpick_ignore_regex = site.nitpick_ignore_regex
autodoc_typehints = "none"
numpydoc_show_class_members = False
{more}

def setup(app):
    app.connect("missing-reference", site._resolve_reexport)
    app.connect("autodoc-process-docstring", site._escape_bars)
"""


def _build(tmp_path, index_rst, extra=(), more=""):
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(CONF.format(conf=str(ROOT / "docs" / "conf.py"), extra=list(extra), more=more))
    (src / "index.rst").write_text(textwrap.dedent(index_rst))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MPLBACKEND": "agg", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-n", "-W", "--keep-going", "-q",
                        str(src), str(tmp_path / "out")], capture_output=True, text=True, env=env,
                       timeout=300)
    return r.returncode, r.stdout + r.stderr


PAGE = """
Test
====

.. autoclass:: rieszflow.engine.space.Ball
   :members: sample_uniform

{refs}
"""


def test_resolving_references_build(tmp_path):
    rc, out = _build(tmp_path, PAGE.format(
        refs=":class:`rieszflow.Ball`, "
             ":meth:`rieszflow.engine.space.Ball.sample_uniform`, :class:`numpy.ndarray`."))
    assert rc == 0, out


@pytest.mark.parametrize("ref", [":func:`rieszflow.engine.space.no_such_function`",
                                 ":class:`rieszflow.NoSuchClass`",
                                 ":meth:`rieszflow.Ball.no_such_method`"])
def test_a_broken_reference_fails_the_build(tmp_path, ref):
    rc, out = _build(tmp_path, PAGE.format(refs=f"A reference: {ref}."))
    assert rc != 0
    assert "reference target not found" in out and ref.split("`")[1] in out, out


def test_a_failing_gallery_script_fails_the_build(tmp_path):
    gallery = tmp_path / "examples"
    gallery.mkdir()
    (gallery / "GALLERY_HEADER.rst").write_text("Gallery\n=======\n")
    (gallery / "broken.py").write_text('"""\nBroken\n======\n\nA script that raises.\n"""\n'
                                       'raise RuntimeError("this example is broken")\n')
    more = (f"sphinx_gallery_conf = dict(site.sphinx_gallery_conf, examples_dirs={str(gallery)!r}, "
            f"gallery_dirs='auto_examples')")
    rc, out = _build(tmp_path, "Test\n====\n\n.. toctree::\n\n   auto_examples/index\n",
                     extra=["sphinx_gallery.gen_gallery"], more=more)
    assert rc != 0
    assert "this example is broken" in out, out
