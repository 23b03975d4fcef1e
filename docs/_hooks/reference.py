"""MkDocs hooks: pages generated at build time, so that they cannot drift from their source.

- `reference/config.md`: the config reference, from the pydantic schemas;
- the benchmarks page's summary table, from `bench/RESULTS.md` (between its summary markers).
"""

from pathlib import Path

from mkdocs.structure.files import File

SUMMARY_SLOT = "<!-- results-summary: the table of bench/RESULTS.md, inserted when the site is built -->"


def on_files(files, config):
    from posttrain.config.reference import markdown

    files.append(File.generated(config, "reference/config.md", content=markdown()))
    return files


def results_summary(results: Path) -> str:
    text = results.read_text()
    start, end = text.index("<!-- summary:start -->"), text.index("<!-- summary:end -->")
    return text[start + len("<!-- summary:start -->") : end].strip()


def on_page_markdown(markdown, page, config, files):
    if SUMMARY_SLOT not in markdown:
        return markdown
    results = Path(config["config_file_path"]).parent / "bench" / "RESULTS.md"
    return markdown.replace(SUMMARY_SLOT, results_summary(results))
