"""Fetch the software manuals the question sets in this folder are written against, from Debian's packages.

Each manual is one Debian documentation package, downloaded with ``apt-get download`` into
``~/.cache/modular-rag/manuals/debs/`` and unpacked with ``dpkg-deb -x`` into
``~/.cache/modular-rag/manuals/<name>/pkg/``; the manual's pages are one sub-folder of that tree. Nothing is
copied into the repository. Run again, it skips what is already there.

Usage::

    python benchmarks/manuals/fetch.py git django texworks

prints one line per name: the folder of that manual's pages.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple


class Manual(NamedTuple):
    """One manual: where it comes from and where its pages are.

    Attributes:
        package: The Debian package that ships it.
        version: The package version the question set was written against (another one is used with a warning).
        folder: The folder of its pages inside the unpacked package.
        description: One line saying what it is.
    """

    package: str
    version: str
    folder: str
    description: str


MANUALS: dict[str, Manual] = {
    "git": Manual(
        package="git-doc",
        version="1:2.39.5-0+deb12u3",
        folder="usr/share/doc/git-doc",
        description="Git's manual pages, user manual, guides and how-tos as AsciiDoc-generated HTML",
    ),
    "django": Manual(
        package="python-django-doc",
        version="3:3.2.25-0+deb12u7",
        folder="usr/share/doc/python-django-doc/html/ref",
        description="Django 3.2's API reference (settings, models, forms, views, contrib apps) as Sphinx HTML",
    ),
    "texworks": Manual(
        package="texworks-help-en",
        version="20210308-2",
        folder="usr/share/doc/texworks-help-en",
        description="A short manual for TeXworks, the TeX editor, as one 71-page PDF (manual.pdf)",
    ),
}
"""Every known manual by name."""


class FetchError(RuntimeError):
    """A manual could not be fetched; the message names what failed."""


def cache_root() -> Path:
    """The folder all manuals are kept in.

    Returns:
        ``$XDG_CACHE_HOME/modular-rag/manuals``, or ``~/.cache/modular-rag/manuals`` without that variable.
    """
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "modular-rag" / "manuals"


def _known() -> str:
    """The known names, for error messages."""
    return ", ".join(sorted(MANUALS))


def _lookup(name: str) -> Manual:
    """The manual of a name.

    Args:
        name: A key of :data:`MANUALS`.

    Returns:
        Its entry.

    Raises:
        FetchError: If the name is not known (the message lists the known ones).
    """
    try:
        return MANUALS[name]
    except KeyError:
        raise FetchError(f"unknown manual {name!r}; known manuals: {_known()}") from None


def _tool(command: str) -> str:
    """The path of a command this script needs.

    Args:
        command: ``apt-get`` or ``dpkg-deb``.

    Returns:
        Its full path.

    Raises:
        FetchError: If it is not on ``PATH``.
    """
    found = shutil.which(command)
    if found is None:
        raise FetchError(f"{command} not found on PATH; fetching manuals needs a Debian system (apt-get, dpkg-deb)")
    return found


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing its output.

    Args:
        argv: The command and its arguments.
        cwd: The folder to run it in.

    Returns:
        The finished process (its exit code is not checked).
    """
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)


def _debs(debs: Path, package: str) -> list[Path]:
    """The downloaded ``.deb`` files of a package, newest name last.

    Args:
        debs: The download folder.
        package: The package name.

    Returns:
        The matching files, sorted by name.
    """
    return sorted(debs.glob(f"{package}_*.deb"))


_updated = False
"""Whether this process has already run ``apt-get update`` (it runs it at most once)."""


def download(manual: Manual, debs: Path) -> Path:
    """Download a manual's package unless a ``.deb`` of it is already there.

    ``apt-get download`` is tried first as the package lists are; if it fails, ``apt-get update`` runs once per
    process and the download is tried again.

    Args:
        manual: The manual.
        debs: The download folder (created if missing).

    Returns:
        The ``.deb`` file.

    Raises:
        FetchError: If the package cannot be downloaded (the message has apt-get's last lines).
    """
    global _updated
    debs.mkdir(parents=True, exist_ok=True)
    found = _debs(debs, manual.package)
    if found:
        return found[-1]
    apt_get = _tool("apt-get")
    result = _run([apt_get, "download", manual.package], debs)
    if result.returncode != 0 and not _updated:
        update = _run([apt_get, "update"], debs)
        _updated = True
        if update.returncode != 0:
            tail = (update.stderr or update.stdout).strip().splitlines()[-3:]
            raise FetchError(f"apt-get update failed (exit {update.returncode}): " + " | ".join(tail))
        result = _run([apt_get, "download", manual.package], debs)
    found = _debs(debs, manual.package)
    if result.returncode != 0 or not found:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise FetchError(
            f"apt-get download {manual.package} failed (exit {result.returncode}): "
            + (" | ".join(tail) or "no output")
            + f"; the package must be available from the configured apt sources (see apt-cache policy {manual.package})"
        )
    return found[-1]


def _version(deb: Path) -> str:
    """The version recorded in a ``.deb``.

    Args:
        deb: The package file.

    Returns:
        Its ``Version`` field, or an empty string if ``dpkg-deb`` cannot read it.
    """
    result = _run([_tool("dpkg-deb"), "--field", str(deb), "Version"], deb.parent)
    return result.stdout.strip() if result.returncode == 0 else ""


def extract(deb: Path, target: Path) -> None:
    """Unpack a ``.deb`` into ``target`` unless that folder is already there.

    The package is unpacked into a temporary folder beside ``target`` and renamed into place, so an interrupted run
    leaves no half-unpacked tree behind.

    Args:
        deb: The package file.
        target: The folder to unpack into (``<name>/pkg``).

    Raises:
        FetchError: If ``dpkg-deb -x`` fails.
    """
    if target.is_dir():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    dpkg_deb = _tool("dpkg-deb")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".extract-") as tmp:
        unpacked = Path(tmp) / "pkg"
        result = _run([dpkg_deb, "-x", str(deb), str(unpacked)], target.parent)
        if result.returncode != 0:
            raise FetchError(f"dpkg-deb -x {deb.name} failed (exit {result.returncode}): {result.stderr.strip()}")
        unpacked.rename(target)


def manual_path(name: str) -> Path:
    """The folder of a manual's pages, fetching and unpacking its Debian package first if needed.

    Args:
        name: A key of :data:`MANUALS` (``git``, ``django``, ``texworks``).

    Returns:
        ``~/.cache/modular-rag/manuals/<name>/pkg/<folder>``.

    Raises:
        FetchError: If the name is unknown, the package cannot be downloaded or unpacked, or the unpacked package
            has no such folder.
    """
    manual = _lookup(name)
    root = cache_root()
    pages = root / name / "pkg" / manual.folder
    if pages.is_dir():
        return pages
    deb = download(manual, root / "debs")
    got = _version(deb)
    if got and got != manual.version:
        print(
            f"warning: {manual.package} {got} differs from {manual.version}, the version {name}.jsonl was written"
            " against; some pages may have changed",
            file=sys.stderr,
        )
    extract(deb, root / name / "pkg")
    if not pages.is_dir():
        raise FetchError(f"{manual.package} unpacked, but it has no folder {manual.folder}")
    return pages


def main(argv: list[str] | None = None) -> int:
    """Fetch the named manuals and print the folder of each one's pages.

    Args:
        argv: The command-line arguments (``sys.argv[1:]`` when ``None``).

    Returns:
        0 when every manual was fetched, 2 for an unknown name (nothing is fetched then), 1 when a fetch failed.
    """
    lines = [f"  {key:<9} {entry.package} {entry.version}: {entry.description}" for key, entry in MANUALS.items()]
    parser = argparse.ArgumentParser(
        description="Download and unpack software manuals from Debian's packages; print each one's folder.",
        epilog="known manuals:\n" + "\n".join(lines),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="+", metavar="NAME", help=f"a manual to fetch: {_known()}")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in MANUALS]
    if unknown:
        print(f"error: unknown manual {', '.join(map(repr, unknown))}; known manuals: {_known()}", file=sys.stderr)
        return 2
    code = 0
    for name in args.names:
        try:
            print(manual_path(name), flush=True)
        except FetchError as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
