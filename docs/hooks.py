"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

What they do during ``mkdocs build``:

* **Gallery.** Every example of :data:`mbs.gallery.EXAMPLES` is run off-screen at reduced size:
  ``examples/gallery_images.py`` renders its picture and ``docs/render_gallery.py`` its
  animation and printed results; ``examples/demo.py`` runs for the getting-started page. One
  page per example is generated (``gallery/NAME.md``) and added to the navigation. A script of
  ``examples/`` that is not registered yet but defines ``build()`` is run the same way (with
  its ``RECOMMENDED`` settings); one that defines no ``build()`` and is not one of the two
  tools fails the build.
* **Generated content.** Markers in the pages are replaced:
  ``<!-- mbs:solver-table -->`` by :func:`mbs.solvers.solver_table` (the function that also
  generates the README's table), ``<!-- mbs:exports MODULE -->`` by a table of the names in
  ``MODULE.__all__`` linked to their reference, ``<!-- mbs:demo -->`` by the demo's output and
  animation, ``<!-- mbs:gallery-grid -->`` by the gallery overview and
  ``<!-- mbs:readme-table SECTION -->`` by the first table of that README section (with the
  footnote paragraph that follows it), ``<!-- mbs:package PACKAGE -->`` by the reference of a
  package (what its ``__init__`` defines, then its exports table), ``<!-- mbs:modules
  PACKAGE -->`` by the reference of every module of PACKAGE no API page names, and
  ``<!-- mbs:api-index -->`` by the list of all modules and their pages.
* **Cross-references by public name.** A link ``[text][mbs.forces.Damper]`` names an object by
  the path users import it from; it is rewritten to the module that defines it (where the
  reference documents it), so pages survive moves between private modules.
* **Checked examples.** On a page whose front matter says ``execute: true``, every fenced block
  opened with ```` ```python ```` is executed (the blocks of a page share one namespace, in a
  temporary working directory); a failing block fails the build. ```` ```python show ````
  also prints the block's output below it, ```` ```python image=NAME.png ```` (or ``.gif``)
  shows the file the block wrote under that name; ```` ```py ```` blocks are shown, not run.
  Pages without that front matter (excerpts of the library's source, fragments) are shown as
  written.
* **Optional pages.** ``formulations.md`` is added to the Concepts section when it exists.

``MBS_DOCS_QUICK=1`` skips running anything (examples, code blocks): the gallery pages then show
the committed pictures of ``docs/gallery/``. CI builds without it (``.ci/docs``).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
QUICK = os.environ.get("MBS_DOCS_QUICK", "").strip() not in ("", "0")
TOOLS = {"demo", "gallery_images"}  # scripts of examples/ that are not gallery entries
log = logging.getLogger("mkdocs.hooks.mbs")

_state: dict = {}


def _environment() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")
    env.setdefault("MPLBACKEND", "Agg")
    return env


def _examples() -> dict[str, dict]:
    """Every example: the registered ones, then scripts of examples/ not registered yet.

    Values: ``title``, ``module`` (file stem), ``target`` (what ``mbs.gallery.load_example``
    takes: the registered name or the script's path) and ``registered``.
    """
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from mbs.gallery import EXAMPLES, available

    examples = {name: {"title": entry.title, "module": entry.module, "target": name,
                       "registered": True}
                for name, entry in EXAMPLES.items() if available(name)}
    known = {entry["module"] for entry in examples.values()} | TOOLS
    for path in sorted((ROOT / "examples").glob("*.py")):
        if path.stem in known:
            continue
        tree = ast.parse(path.read_text())
        if not any(isinstance(node, ast.FunctionDef) and node.name == "build"
                   for node in tree.body):
            raise PluginError(f"examples/{path.name} defines no build() and is not one of the "
                              f"tools {sorted(TOOLS)}: the gallery cannot run it")
        title = (ast.get_docstring(tree) or path.stem).strip().splitlines()[0].rstrip(".:")
        examples[path.stem.replace("_", "-")] = {
            "title": title, "module": path.stem, "target": f"examples/{path.name}",
            "registered": False}
    return examples


# -- configuration and navigation ----------------------------------------------------------
def on_config(config, **kwargs):
    os.environ.setdefault("MPLBACKEND", "Agg")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    examples = _examples()
    nav = config.nav or []
    for section in nav:
        if isinstance(section, dict) and "Gallery" in section:
            section["Gallery"] = [*section["Gallery"],
                                  *({_capital(entry["title"]): f"gallery/{name}.md"}
                                    for name, entry in examples.items())]
        if (isinstance(section, dict) and "Concepts" in section
                and (DOCS / "formulations.md").is_file()):
            pages = section["Concepts"]
            if not any("formulations.md" in str(page) for page in pages):
                pages.insert(1, "formulations.md")
    return config


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


# -- running the examples ------------------------------------------------------------------
def _run(command: list[str], label: str, cwd: Path = ROOT) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=cwd, env=_environment(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, label: str) -> str:
    try:
        out, err = process.communicate(timeout=900)
    except subprocess.TimeoutExpired as exc:
        process.kill()
        raise PluginError(f"{label}: no result within 900 s") from exc
    if process.returncode != 0:
        raise PluginError(f"{label} failed (exit {process.returncode}):\n{err[-4000:]}")
    return out


def on_pre_build(config, **kwargs):
    _state.clear()
    _state["examples"] = _examples()
    if QUICK:
        log.info("MBS_DOCS_QUICK: examples and code blocks are not run")
        return
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="mbs-docs-"))
    _state["work"] = work
    rendered = work / "rendered"
    rendered.mkdir()
    python = sys.executable
    examples = _state["examples"]
    registered = [name for name, entry in examples.items() if entry["registered"]]
    running: list[subprocess.Popen] = []
    try:  # two processes at a time: the pictures and the animations, then the demo
        pictures = _run([python, "examples/gallery_images.py", str(rendered), *registered,
                         "--resolution", "320x240"], "examples/gallery_images.py")
        running.append(pictures)
        animations = _run([python, "docs/render_gallery.py", str(rendered),
                           *(name if entry["registered"] else f"{name}={entry['target']}"
                             for name, entry in examples.items())], "docs/render_gallery.py")
        running.append(animations)
        _finish(pictures, "examples/gallery_images.py")
        demo_folder = work / "demo"
        demo_folder.mkdir()
        demo = _run([python, str(ROOT / "examples" / "demo.py"), "--t-end", "1.0",
                     "--animation", "output/top.gif"], "examples/demo.py", cwd=demo_folder)
        running.append(demo)
        _finish(animations, "docs/render_gallery.py")
        _state["demo_output"] = _finish(demo, "examples/demo.py")
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
                process.wait()
    _state["results"] = json.loads((rendered / "results.json").read_text())
    missing = [name for name in _state["examples"]
               if not (rendered / f"{name}.png").is_file()
               or not (rendered / f"{name}.gif").is_file()]
    if missing or not (work / "demo" / "output" / "top.gif").is_file():
        raise PluginError(f"gallery: no picture or animation for {missing or ['demo']}")
    log.info(f"gallery: {len(_state['examples'])} examples and the demo run and rendered in "
             f"{time.perf_counter() - started:.0f} s")


def on_files(files, config, **kwargs):
    for name in _state["examples"]:
        files.append(File.generated(config, f"gallery/{name}.md", content=_gallery_page(name)))
    work = _state.get("work")
    if work is not None:
        for path in sorted((work / "rendered").glob("*.*")):
            if path.suffix in (".png", ".gif"):
                files.append(File.generated(config, f"gallery/rendered/{path.name}",
                                            abs_src_path=str(path)))
        files.append(File.generated(config, "demo-top.gif",
                                    abs_src_path=str(work / "demo" / "output" / "top.gif")))
    return files


def on_post_build(config, **kwargs):
    work = _state.get("work")
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)


# -- generated pages -----------------------------------------------------------------------
def _markdown_from_docstring(text: str) -> str:
    """An example's module docstring as Markdown (reST literals become code)."""
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return text


def _picture(name: str, alt: str) -> str:
    """Markdown image of example ``name`` for a page in gallery/ ('' when there is none)."""
    if _state.get("work") is not None:
        return f"![{alt}](rendered/{name}.png)"
    if (DOCS / "gallery" / f"{name}.png").is_file():
        return f"![{alt}]({name}.png)"
    return ""


def _gallery_page(name: str) -> str:
    entry = _state["examples"][name]
    script = f"examples/{entry['module']}.py"
    source = (ROOT / script).read_text()
    docstring = ast.get_docstring(ast.parse(source)) or entry["title"]
    result = _state.get("results", {}).get(name)
    command = name if entry["registered"] else script
    lines = [f"# {_capital(entry['title'])}", "",
             f"`{script}`: run it with `mbs run {command}` (add `--animate {name}.mp4` for a "
             f"video).", ""]
    if result is not None:
        lines += [f"![{name}: animation](rendered/{name}.gif){{ width=\"320\" }} "
                  + _picture(name, f"{name}: picture at 60 % of the run")
                  + "{ width=\"320\" }", ""]
    elif _picture(name, name):
        lines += [_picture(name, name), ""]
    lines += [_markdown_from_docstring(docstring), ""]
    if result is not None:
        settings = result["settings"]
        lines += ["## Run", "",
                  f"Rendered while these pages were built: `mbs.simulate(model, "
                  f"\"{settings['solver']}\", h={settings['h']!r}, "
                  f"t_end={settings['t_end']!r})`, {result['steps']} steps in "
                  f"{result['simulation_seconds']} s; the animation shows the whole run in "
                  f"48 frames, the picture the state at 60 % of the first 3 s.", "",
                  "```text", result["summary"].rstrip()]
        if result.get("report"):
            lines += ["", result["report"].rstrip()]
        lines += ["```", ""]
        if result.get("warnings"):
            lines += ["Warnings of the run:", "", "```text",
                      *[w.rstrip() for w in result["warnings"]], "```", ""]
    lines += ["## Source", "", f"```py title=\"{script}\"", source.rstrip(), "```", ""]
    return "\n".join(lines)


def _gallery_grid() -> str:
    examples = _state["examples"]
    cells = [(f"[{_picture(name, name)}]({name}.md)<br>" if _picture(name, name) else "")
             + f"[{entry['title']}]({name}.md)" for name, entry in examples.items()]
    columns = 3
    rows = ["| " + " | ".join([""] * columns) + " |", "|" + "---|" * columns]
    for start in range(0, len(cells), columns):
        chunk = cells[start:start + columns]
        chunk += [""] * (columns - len(chunk))
        rows.append("| " + " | ".join(chunk) + " |")
    return "\n".join(rows)


def _demo() -> str:
    if QUICK:
        return ("*(The demo's output is shown here when the site is built without "
                "`MBS_DOCS_QUICK`.)*")
    output = _state["demo_output"].rstrip()
    return "\n".join(["Output of `python examples/demo.py --t-end 1.0` while these pages were "
                      "built:", "", "```text", output, "```", "",
                      "![the heavy top of the demo](demo-top.gif){ width=\"480\" }"])


def _package() -> object:
    """The package ``mbs`` as griffe sees it (loaded once per build)."""
    if "griffe" not in _state:
        import griffe

        _state["griffe"] = griffe.load("mbs", search_paths=[str(ROOT)],
                                       docstring_parser="numpy")
    return _state["griffe"]


def _lookup(path: str):
    """The object at a dotted path below ``mbs`` (aliases followed), or None."""
    obj = _package()
    for part in path.split(".")[1:]:
        try:
            obj = obj.members[part]
            if obj.is_alias:
                obj = obj.final_target
        except Exception:  # noqa: BLE001 - unknown or unresolvable: no object
            return None
    return obj


def _canonical(match: re.Match) -> str:
    path = match.group(1)
    obj = _lookup(path)
    if obj is not None and obj.is_module and path.rpartition(".")[2] in obj.members:
        obj = obj.members[path.rpartition(".")[2]]  # mbs.simulate: the function, not the module
    return f"][{obj.canonical_path if obj is not None else path}]"


def _package_reference(name: str) -> str:
    """``::: package`` with the members its ``__init__`` defines, then its exports table."""
    module = _lookup(name)
    local = [member for member, obj in module.members.items()
             if not obj.is_alias and not obj.is_module and not member.startswith("_")]
    members = f"[{', '.join(local)}]" if local else "false"
    return "\n".join([f"::: {name}", "    options:", f"      members: {members}", "",
                      _exports(name)])


def _exports(module_name: str) -> str:
    module = _lookup(module_name)
    names = module.exports
    if not names:
        raise PluginError(f"mbs:exports {module_name}: the module has no __all__")
    rows = ["| name | kind | summary |", "|---|---|---|"]
    for name in sorted(names, key=lambda n: (n.lower(), n)):
        member = module[name]
        target = member.final_target if member.is_alias else member
        if target.is_module and name in target.members:
            target = target[name]  # mbs.simulate: the module and its function share the name
        docstring = target.docstring.value if target.docstring else ""
        summary = docstring.strip().split("\n\n")[0].replace("\n", " ")
        summary = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", summary).replace("|", "\\|")
        kind = target.kind.value
        rows.append(f"| [`{name}`][{target.canonical_path}] | {kind} | {summary} |")
    return "\n".join(rows)


def _readme_table(section: str) -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"^##+ {re.escape(section)}\s*$", text, re.M)
    if match is None:
        raise PluginError(f"mbs:readme-table: README has no section {section!r}")
    lines = text[match.end():].splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        raise PluginError(f"mbs:readme-table: README section {section!r} has no table")
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    table = lines[start:end]
    rest = lines[end:]
    while rest and not rest[0].strip():
        rest = rest[1:]
    if rest and rest[0].startswith("¹"):
        note = []
        for line in rest:
            if not line.strip():
                break
            note.append(line)
        table += ["", *note]
    return "\n".join(table)


def all_modules() -> list[str]:
    """Every module of the package ``mbs`` (found in its files; ``__main__`` excluded)."""
    names = []
    for path in sorted((ROOT / "mbs").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] == "__main__" or any(part.startswith("_") for part in parts):
            continue
        names.append(".".join(parts))
    return names


NAMED = re.compile(r"^::: (\S+)|<!-- mbs:package (\S+) -->", re.M)


def _named(text: str) -> list[str]:
    """Modules a page names: ``::: module`` directives and ``mbs:package`` markers."""
    return [a or b for a, b in NAMED.findall(text)]


def _explicit_modules() -> set[str]:
    """Modules named explicitly on an API page."""
    names: set[str] = set()
    for path in (DOCS / "api").glob("*.md"):
        names.update(_named(path.read_text()))
    return names


def _remaining_modules(package: str) -> list[str]:
    """Child modules of ``package`` that no API page names explicitly."""
    explicit = _explicit_modules()
    return [name for name in all_modules()
            if name.rpartition(".")[0] == package and name not in explicit]


def _modules(package: str) -> str:
    return "\n\n".join(f"::: {name}" for name in _remaining_modules(package))


def _module_summary(name: str) -> str:
    base = ROOT / Path(*name.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    summary = docstring.strip().split("\n\n")[0].replace("\n", " ")
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", summary).replace("|", "\\|")


def _api_index() -> str:
    pages = {}
    for path in sorted((DOCS / "api").glob("*.md")):
        text = path.read_text()
        for name in _named(text):
            pages[name] = path.name
        for package in re.findall(r"<!-- mbs:modules (\S+) -->", text):
            for name in _remaining_modules(package):
                pages[name] = path.name
    rows = ["| module | page | summary |", "|---|---|---|"]
    for name in all_modules():
        if name not in pages:
            raise PluginError(f"module {name} is on no API reference page")
        rows.append(f"| [`{name}`][{name}] | [{pages[name][:-3]}]({pages[name]}) | "
                    f"{_module_summary(name)} |")
    return "\n".join(rows)


MARKER = re.compile(r"^[ \t]*<!-- mbs:([a-z-]+)(?: ([^>]*?))? -->[ \t]*$", re.M)


def _replace_marker(match: re.Match) -> str:
    kind, argument = match.group(1), (match.group(2) or "").strip()
    if kind == "solver-table":
        from mbs.solvers import solver_table

        return solver_table()
    if kind == "exports":
        return _exports(argument)
    if kind == "demo":
        return _demo()
    if kind == "gallery-grid":
        return _gallery_grid()
    if kind == "readme-table":
        return _readme_table(argument)
    if kind == "modules":
        return _modules(argument)
    if kind == "package":
        return _package_reference(argument)
    if kind == "api-index":
        return _api_index()
    raise PluginError(f"unknown marker mbs:{kind}")


# -- executed code blocks ------------------------------------------------------------------
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>python[^\n]*)\n(?P<code>.*?)^(?P=indent)```"
                   r"[ \t]*$", re.M | re.S)


def _publish(path: Path, page, files, config) -> str:
    """Add a file a code block wrote to the site, next to ``page``; returns its link."""
    folder = _state["work"] / "pages"
    folder.mkdir(exist_ok=True)
    stem = Path(page.file.src_uri).stem
    name = f"{stem}-{path.name}"
    target = folder / f"{page.file.src_uri.replace('/', '_')}-{path.name}"
    shutil.copyfile(path, target)
    directory = str(Path(page.file.src_uri).parent)
    uri = name if directory == "." else f"{directory}/{name}"
    files.append(File.generated(config, uri, abs_src_path=str(target)))
    return name


def _execute_blocks(markdown: str, page, files, config) -> str:
    namespace: dict = {"__name__": "__docs__"}
    workdir = Path(tempfile.mkdtemp(prefix="mbs-docs-page-"))
    counter = {"n": 0}

    def run(match: re.Match) -> str:
        indent, info, code = match.group("indent"), match.group("info").split(), match.group(
            "code")
        counter["n"] += 1
        options = set(info[1:])
        header = f"{indent}```python"
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line
                         for line in code.splitlines())
        shown = f"{header}\n{code}{indent}```"
        if QUICK:
            return shown
        buffer = io.StringIO()
        previous = Path.cwd()
        os.chdir(workdir)
        try:
            with contextlib.redirect_stdout(buffer), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                exec(compile(body, f"{page.file.src_uri} (block {counter['n']})", "exec"),
                     namespace)
        except Exception as exc:
            raise PluginError(f"{page.file.src_uri}: code block {counter['n']} failed:\n"
                              f"{traceback.format_exc(limit=-3)}") from exc
        finally:
            os.chdir(previous)
        images = [option.split("=", 1)[1] for option in options
                  if option.startswith("image=")]
        pictures = []
        for image in images:
            written = workdir / image
            if not written.is_file():
                raise PluginError(f"{page.file.src_uri}: code block {counter['n']} wrote no "
                                  f"{image}")
            pictures.append(f"{indent}![{image}]({_publish(written, page, files, config)})")
        if pictures:
            shown = "\n\n".join([shown, *pictures])
        if "show" not in options:
            return shown
        output = buffer.getvalue().rstrip()
        messages = sorted({f"{type(w.message).__name__}: {w.message}" for w in caught})
        if messages:
            output = "\n".join([output, *messages]).strip()
        if not output:
            return shown
        block = "\n".join(indent + line for line in ["```text title=\"output\"",
                                                      *output.splitlines(), "```"])
        return f"{shown}\n\n{block}"

    sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
    try:
        return FENCE.sub(run, markdown)
    finally:
        del sys.path[:2]
        shutil.rmtree(workdir, ignore_errors=True)


CROSS_REFERENCE = re.compile(r"\]\[(mbs(?:\.[A-Za-z_]\w*)*)\]")


def on_page_markdown(markdown, page, config, files, **kwargs):
    markdown = MARKER.sub(_replace_marker, markdown)
    markdown = CROSS_REFERENCE.sub(_canonical, markdown)
    if page.file.src_uri in {f"gallery/{name}.md" for name in _state["examples"]}:
        return markdown  # example sources are shown, not run here (the gallery ran them)
    if not page.meta.get("execute"):
        return markdown
    return _execute_blocks(markdown, page, files, config)
