"""What `import workbook` costs next to `import tensorflow` (fresh interpreters, median of 5)."""

import statistics
import subprocess
import sys
import time

STATEMENTS = {
    "import tensorflow": "import tensorflow",
    "import workbook": "import workbook",
    "import workbook; workbook.SURROGATES['round_ste'](1.0) (first use loads TensorFlow)": (
        "import workbook; workbook.SURROGATES['round_ste'](1.0)"
    ),
}


def cold_start(statement, repeats=5):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main():
    baseline = cold_start("pass")
    seconds = {name: cold_start(code) - baseline for name, code in STATEMENTS.items()}
    tensorflow = seconds["import tensorflow"]
    rows = ["| statement | seconds (interpreter start subtracted) | ratio to `import tensorflow` |", "|---|---|---|"]
    rows += [f"| `{name}` | {value:.2f} | {value / tensorflow:.2f}x |" for name, value in seconds.items()]
    return "## Import cost\n\nTarget: `import workbook` at most 2x `import tensorflow`.\n\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(main())
