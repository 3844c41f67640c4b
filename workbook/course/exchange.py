"""nbgrader's ``collect`` that never follows a link a student left in the exchange.

Introduced in course/README.md (``c.ExchangeFactory.collect`` in course/nbgrader_config.py);
needs nbgrader. A student owns their folder in the exchange's inbound folder, and can change
it after submitting: nbgrader's own collect copies it with :func:`shutil.copytree`, which
copies what a link points to, so a link to the instructor's source notebook (or any file the
instructor may read) was collected as the student's work. This collect walks each submission
through handles, one folder at a time, opening every name with ``O_NOFOLLOW``: a link, or
anything but a regular file or a folder, is left out and named in the log.
"""

import os
import shutil
import stat

from nbgrader.exchange.default import ExchangeCollect
from nbgrader.utils import ignore_patterns

__all__ = ["LinkRefusingCollect"]

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # a pipe planted in place of a file never blocks


class LinkRefusingCollect(ExchangeCollect):
    """nbgrader's ``ExchangeCollect``, copying each submission without following any link in it."""

    def do_copy(self, src, dest, log=None):
        """Copy the folder ``src`` to ``dest`` (which must not exist), leaving out links; nbgrader's limits hold."""
        try:
            folder = os.open(src, _FOLDER)
        except OSError as error:
            self.log.error("Not collected: %s is not a folder of its own (%s).", src, error.strerror)
            return
        try:
            skipped = []
            self._copy_folder(folder, src, dest, skipped, budget=[1000 * self.coursedir.max_dir_size])
        except RuntimeError as error:  # too big: nothing of it is kept, and the next student is collected
            shutil.rmtree(dest, ignore_errors=True)
            self.log.error("Not collected: %s (%s).", src, error)
            return
        finally:
            os.close(folder)
        for path, why in skipped:
            self.log.warning("Not collected: %s (%s).", path, why)

    def _copy_folder(self, folder, path, dest, skipped, budget):
        os.mkdir(dest, 0o700)
        kinds = _kinds(folder)
        plain = [name for name, kind in kinds.items() if stat.S_ISREG(kind) or stat.S_ISDIR(kind)]
        # nbgrader's own include / ignore / size rules, asked only about plain files and folders
        rules = ignore_patterns(
            exclude=self.coursedir.ignore,
            include=self.coursedir.include,
            max_file_size=self.coursedir.max_file_size,
            log=self.log,
        )
        ignored = set(rules(path, plain))
        for name, kind in kinds.items():
            where = os.path.join(path, name)
            if name not in plain:
                skipped.append((where, "a link" if stat.S_ISLNK(kind) else "not a file or a folder"))
            elif name not in ignored:
                opening = _FOLDER if stat.S_ISDIR(kind) else _FILE
                self._copy_entry(folder, name, opening, where, os.path.join(dest, name), skipped, budget)
        os.chmod(dest, 0o755)

    def _copy_entry(self, folder, name, opening, where, target, skipped, budget):
        try:
            handle = os.open(name, opening, dir_fd=folder)
        except OSError as error:  # replaced by a link since it was listed
            skipped.append((where, error.strerror))
            return
        try:
            info = os.fstat(handle)
            if stat.S_ISDIR(info.st_mode):
                self._copy_folder(handle, where, target, skipped, budget)
            elif not stat.S_ISREG(info.st_mode):
                skipped.append((where, "not a file"))
            elif info.st_size > budget[0]:
                raise RuntimeError(f"Directory size is too big: {where} would go past {self.coursedir.max_dir_size} kB")
            else:
                budget[0] -= info.st_size
                with os.fdopen(os.dup(handle), "rb") as source, open(target, "xb") as copy:
                    copy.write(source.read(info.st_size + 1))
                os.chmod(target, 0o644)
        finally:
            os.close(handle)


def _kinds(folder):
    """{name: its mode, the name itself never followed} of the open ``folder``, sorted (0: gone since listed)."""
    kinds = {}
    for name in sorted(os.listdir(folder)):
        try:
            kinds[name] = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except OSError:
            kinds[name] = 0
    return kinds
