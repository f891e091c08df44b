"""grpo-exp compare: the table and its HTML report."""


def test_the_html_report_is_richs_export_of_the_table_with_the_heatmap_inlined(tmp_path):
    from grpo_exp.results import compare

    runs = [
        compare.Run(
            str(i),
            {"trainer.num_generations": str(g), "trainer.per_device_train_batch_size": str(b)},
            {"status": status, "memory/peak/train/host_rss_max_gib": 1.5 + i},
        )
        for i, (g, b, status) in enumerate(
            [(2, 4, "completed"), (2, 8, "completed"), (4, 4, "completed"), (4, 8, "oom")]
        )
    ]
    png = compare.heatmap(runs, tmp_path / "h.png")
    page = compare.html_report(runs, png, tmp_path / "r.html", "sweep x").read_text()
    assert page.startswith("<!doctype html>") and "<title>sweep x</title>" in page and "data:image/png;base64," in page
    assert "trainer.num_generations" in page and page.count("completed") == 3 and "oom" in page
