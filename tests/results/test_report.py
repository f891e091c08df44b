"""The run report: what a run was, from its summary.json alone."""

from grpo_exp.results import report


def test_error_texts_are_shown_as_text_never_as_markup(tmp_path, capsys):
    """What a rank, a library or a server wrote (gloo's `[/__w/.../pair.cc:152]`, rich's own `[bold]`, an ANSI
    escape) reaches the console as written: no MarkupError, nothing swallowed, control characters made visible."""
    error = "RuntimeError: Gloo connectFullMesh failed with [/__w/pair.cc:152] remote=[127.0.0.1]:29500 [bold] \x1b[31m"
    report.print_report(tmp_path, {"status": "failed", "exit_code": 1, "error": error})
    out = capsys.readouterr().out
    assert "[/__w/pair.cc:152] remote=[127.0.0.1]:29500 [bold]" in out and "\\x1b[31m" in out and "\x1b[31m" not in out
