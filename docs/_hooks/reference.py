"""MkDocs hook: the config reference page, generated from the pydantic schemas at build time."""

from mkdocs.structure.files import File


def on_files(files, config):
    from posttrain.config.reference import markdown

    files.append(File.generated(config, "reference/config.md", content=markdown()))
    return files
