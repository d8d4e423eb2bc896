"""The command runner reads at most its cap per stream and stops a command that writes more;
the other answers (missing binary, timeout, exit status) are unchanged."""
import sys

from agent.safeio.commands import SubprocessCommands


def test_output_over_the_cap_stops_the_command_and_says_why():
    # 1 MiB written in a loop that would go on for ever; a 64 KiB cap.
    runner = SubprocessCommands(output_cap=64 * 1024)
    res = runner.run([sys.executable, "-c",
                      "import sys\nwhile True: sys.stdout.write('x' * 65536)"], timeout=30)
    assert res.rc == -9
    assert not res.ok
    assert not res.timed_out
    assert len(res.stdout) == 64 * 1024
    assert res.stderr == "output larger than 65536 bytes; stopped"


def test_stderr_is_capped_too():
    runner = SubprocessCommands(output_cap=1000)
    res = runner.run([sys.executable, "-c", "import sys; sys.stderr.write('e' * 5000)"],
                     timeout=30)
    assert res.rc == -9
    assert "output larger than 1000 bytes" in res.stderr


def test_output_under_the_cap_is_whole_with_the_exit_status():
    runner = SubprocessCommands(output_cap=1000)
    res = runner.run([sys.executable, "-c",
                      "import sys; sys.stdout.write('a' * 1000); sys.stderr.write('b'); "
                      "sys.exit(3)"], timeout=30)
    assert (res.rc, res.stdout, res.stderr) == (3, "a" * 1000, "b")


def test_missing_binary_timeout_and_locale_are_as_before():
    runner = SubprocessCommands()
    missing = runner.run(["/nonexistent/gna-binary"], timeout=5)
    assert (missing.rc, missing.not_installed) == (127, True)
    slow = runner.run([sys.executable, "-c", "import time; print('p', flush=True); "
                       "time.sleep(30)"], timeout=0.5)
    assert slow.timed_out and slow.rc == -9 and slow.stdout == "p\n"
    assert slow.stderr == "timed out after 0.5s"
    env = runner.run([sys.executable, "-c", "import os; print(os.environ['LC_ALL'])"], timeout=30)
    assert env.stdout == "C\n"
