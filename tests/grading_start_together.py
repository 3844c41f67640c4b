"""The round trip's own step added to the grader (before its kernel starts): gradings that start in pairs.

tests/test_grading_round_trip.py grades the honest classmates in one ``nbgrader autograde`` and the
attacks on their neighbours in another, side by side. With this step first among nbgrader's
autograde preprocessors, the k-th submission of one run waits for the k-th of the other, so that
each attack starts together with an honest classmate; each arrival is a file,
"{k:02d}-{student}", in ``folder``/<side>. A run that has ended ("done-<side>", written by the
test) or a wait that gave up ends every later wait, so one failed run costs at most one cap,
and the failure is logged. Configured in the course's nbgrader_config.py:
``c.StartTogether.sides = {student: (own side, other side)}``, ``folder`` and ``assignment``.
"""

import pathlib
import time

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Dict, Unicode

#: A cap for a run that failed, never a measure of speed.
WAIT_SECONDS = 600


class StartTogether(NbGraderPreprocessor):
    sides = Dict(help="{student: (their side, the other side)}").tag(config=True)
    folder = Unicode(help="Where the arrivals are written").tag(config=True)
    assignment = Unicode(help="The assignment whose gradings start in pairs").tag(config=True)

    def preprocess(self, nb, resources):
        student = resources["nbgrader"]["student"]
        if resources["nbgrader"]["assignment"] == self.assignment and student in self.sides:
            self._wait_for_the_other_side(student)
        return nb, resources

    def _wait_for_the_other_side(self, student):
        folder = pathlib.Path(self.folder)
        mine, theirs = (folder / side for side in self.sides[student])
        arrived = len(list(mine.iterdir()))
        (mine / f"{arrived:02d}-{student}").touch()

        def waiting():
            gone = (folder / f"done-{theirs.name}").exists() or (folder / "gave-up").exists()
            return len(list(theirs.iterdir())) <= arrived and not gone

        deadline = time.monotonic() + WAIT_SECONDS
        while waiting() and time.monotonic() < deadline:
            time.sleep(0.05)
        if len(list(theirs.iterdir())) <= arrived:
            (folder / "gave-up").touch()
            self.log.error("StartTogether: %s started alone, no submission %d in %s", student, arrived + 1, theirs)
