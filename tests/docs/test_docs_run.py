"""CTest `docs_run`: every block README.md and docs/*.md mark runnable runs, on
the CPU, and the sample outputs shown after it match what it printed (the
markers and the matching rule: tests/docs/doc_blocks.py). One test a block;
a document's blocks run in its order, in one scratch folder, so a test run
alone (-k) first runs the blocks above it."""
from __future__ import annotations

import subprocess

import pytest

import doc_blocks  # beside this file: pytest puts a test's folder on sys.path

BLOCKS = doc_blocks.all_blocks()


@pytest.fixture(scope="session")
def workspaces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, doc_blocks.Workspace]:
    base = tmp_path_factory.mktemp("docs")
    return {doc: doc_blocks.Workspace(doc, base) for doc in doc_blocks.documents()}


def run_up_to(ws: doc_blocks.Workspace, doc: str, block: doc_blocks.Block) -> subprocess.CompletedProcess:
    """Runs the document's blocks above this one (once each), then this one."""
    blocks = [b for b in BLOCKS if b.doc == doc]
    index = blocks.index(block)
    for i, b in enumerate(blocks[:index]):
        ws.run(b, i)
    return ws.run(block, index)


def test_some_blocks_are_marked() -> None:
    """The README's runnable blocks are found (a marker typo would leave none)."""
    assert any(b.doc == "README.md" for b in BLOCKS)
    assert any(b.samples for b in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_block_runs(block: doc_blocks.Block, workspaces: dict[str, doc_blocks.Workspace]) -> None:
    result = run_up_to(workspaces[block.doc], block.doc, block)
    why = doc_blocks.failure(block, result)
    assert why is None, why


SAMPLE = doc_blocks.Sample(line=1, text=["peak 31.9 MiB", "...", "epoch 1 ... 23703 tokens/s"], masks=["tokens/s"],
                           wrapped=False)


def test_sample_matching_rule() -> None:
    """The rule the samples are checked by: lines in order, whitespace runs as one,
    `...` for any lines or any text, masked units' numbers free."""
    out = "noise\npeak   31.9 MiB\nmore\nepoch 1  loss 3.1  9999 tokens/s\n"
    assert doc_blocks.mismatch(SAMPLE, out) is None
    assert doc_blocks.mismatch(SAMPLE, out.replace("31.9", "32.0")) is not None
    assert doc_blocks.mismatch(SAMPLE, "epoch 1 loss 3.1 9999 tokens/s\npeak 31.9 MiB\n") is not None  # order
    unmasked = doc_blocks.Sample(1, ["epoch 1 ... 23703 tokens/s"], [], False)
    assert doc_blocks.mismatch(unmasked, out) is not None
    wrapped = doc_blocks.Sample(1, ["no plan fits:", "try 17%"], [], True)
    assert doc_blocks.mismatch(wrapped, "no plan fits: try 17%\n") is None
    assert doc_blocks.mismatch(wrapped, "no plan fits:\ntry 17%\n") is not None
