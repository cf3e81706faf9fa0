"""The reference pages of the documentation site are generated from the code (the config
models' fields and every command's --help): a hand edit, or a new key or flag without its page
entry, fails here with the command that brings the pages up to date."""

from scripts.docs_reference import REGENERATE, REPO, pages, stale


def test_generated_pages_match_the_code():
    paths = stale()
    assert not paths, (
        f"the generated docs differ from the code: {', '.join(map(str, paths))}; run "
        f"`{REGENERATE}` and commit the pages it rewrites"
    )


def test_every_config_key_has_its_entry():
    """Each settable key of each process's config is a heading of its page."""
    from launcher.shared import COMPONENT_CONFIGS
    from rlcore.config.schema import leaves

    generated = pages()
    for name, model in COMPONENT_CONFIGS.items():
        text = generated[REPO.relative_to(REPO) / f"docs/reference/config/{name}.md"]
        for leaf in leaves(model):
            assert f"### `{leaf.dotted}`" in text, f"{name}: {leaf.dotted}"
