"""The captioner adapter: tiny random BLIP and GIT checkpoints of the real transformers classes, saved to disk
and loaded back through `Captioner.from_pretrained`; clear errors for bad directories; the shipped weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.captioner import Captioner
from pipeline.utils import UserError, canonical_state

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "weights" / "captioner"
SENTENCES = ["red ball top left , blue box bottom right , lamp on .", "empty ."]


def _frames(n: int, size: int = 128, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def tiny_blip_dir(tmp_path_factory) -> Path:
    """A randomly initialised BlipForConditionalGeneration with our word-level tokenizer, saved in HF layout."""
    from transformers import BlipForConditionalGeneration

    from models.captioner import CaptionerConfig, build_blip, build_processor
    from pipeline.training.captioner import build_tokenizer

    torch.manual_seed(0)
    tokenizer = build_tokenizer(SENTENCES)
    config = CaptionerConfig(image_size=32, patch_size=8, vision_layers=1, text_layers=1, hidden=32, heads=2)
    model = build_blip(config, tokenizer)
    assert isinstance(model, BlipForConditionalGeneration)
    path = tmp_path_factory.mktemp("blip")
    model.save_pretrained(path)
    build_processor(tokenizer, config.image_size).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_git_dir(tmp_path_factory) -> Path:
    """A randomly initialised GitForCausalLM with a BERT vocab.txt tokenizer and CLIP image processor."""
    from transformers import BertTokenizer, GitConfig, GitForCausalLM, GitProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("git")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "red", "circle", "lamp", "on", ".", ","]
    (path / "vocab.txt").write_text("\n".join(words) + "\n")
    tokenizer = BertTokenizer(vocab_file=str(path / "vocab.txt"))
    tower = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
    )  # both towers
    config = GitConfig(
        vision_config=dict(**tower, image_size=32, patch_size=8),
        vocab_size=len(words), max_position_embeddings=64, bos_token_id=2, eos_token_id=3, pad_token_id=0, **tower,
    )  # fmt: skip
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    GitForCausalLM(config).save_pretrained(path)
    GitProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(path)
    return path


def test_canonical_state():
    assert canonical_state("Red ball top left, blue box bottom right , lamp on.") == (
        "red ball top left , blue box bottom right , lamp on ."
    )
    assert canonical_state("  empty   .  ") == "empty ."
    assert canonical_state("a,b") == "a , b"


@pytest.mark.parametrize("fixture", ["tiny_blip_dir", "tiny_git_dir"])
def test_adapter_loads_real_classes_and_captions(fixture, request):
    from transformers import BlipForConditionalGeneration, GitForCausalLM

    path = request.getfixturevalue(fixture)
    captioner = Captioner.from_pretrained(path, device="cpu")
    assert isinstance(captioner.model, BlipForConditionalGeneration | GitForCausalLM)
    assert (
        "Pil" in type(captioner.processor.image_processor).__name__
    )  # slow processor: no torchvision needed
    assert captioner.dtype == torch.float32
    frames = _frames(5)
    texts = captioner.caption(frames)
    assert len(texts) == 5
    assert all(isinstance(t, str) and t == canonical_state(t) for t in texts)
    assert all("[" not in t for t in texts)  # special tokens are stripped
    # greedy decoding is deterministic, a frame's caption does not depend on its batch, (B, H, W, 3) arrays work
    assert captioner.caption(np.stack(frames)) == texts
    assert captioner.caption(frames[3]) == texts[3:4]


def test_blip_adapter_fp16_dtype(tiny_blip_dir):
    captioner = Captioner.from_pretrained(tiny_blip_dir, device="cpu", dtype=torch.bfloat16)
    assert captioner.dtype == torch.bfloat16
    assert len(captioner.caption(_frames(2))) == 2


def test_loading_is_offline(tiny_blip_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert len(Captioner.from_pretrained(tiny_blip_dir, device="cpu").caption(_frames(1))) == 1


def test_bad_frames_raise_value_error(tiny_blip_dir):
    captioner = Captioner.from_pretrained(tiny_blip_dir, device="cpu")
    with pytest.raises(ValueError, match="uint8"):
        captioner.caption([np.zeros((32, 32, 3), dtype=np.float32)])
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        captioner.caption([np.zeros((32, 32), dtype=np.uint8)])


def test_missing_directory_is_one_clear_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(UserError, match="no such directory") as err:
        Captioner.from_pretrained(missing)
    assert str(missing) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("remove", "message"),
    [
        ("config.json", "no config.json"),
        ("model.safetensors", "no model weights"),
        ("processor_config.json", "no preprocessor_config.json"),
        ("tokenizer.json", "no tokenizer"),
    ],
)
def test_incomplete_directory_names_what_is_missing(tiny_blip_dir, tmp_path, remove, message):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_blip_dir, broken)
    (broken / remove).unlink()
    with pytest.raises(UserError, match=message) as err:
        Captioner.from_pretrained(broken)
    assert str(broken) in str(err.value)


def test_wrong_model_type_and_file_instead_of_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(UserError, match="not an image-to-text model"):
        Captioner.from_pretrained(tmp_path)
    with pytest.raises(UserError, match="not a directory"):
        Captioner.from_pretrained(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        Captioner.from_pretrained(tmp_path)


def test_corrupt_weights_are_one_clear_error(tiny_blip_dir, tmp_path):
    broken = tmp_path / "corrupt"
    shutil.copytree(tiny_blip_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="could not be loaded"):
        Captioner.from_pretrained(broken)


# ---- the shipped weights -------------------------------------------------------------------------------
@pytest.mark.skipif(not (SHIPPED / "config.json").is_file(), reason="weights/captioner/ not trained yet")
@pytest.mark.integration
def test_shipped_captioner_reads_world_frames_exactly():
    from world import frames_and_states, parse_state

    pairs = list(frames_and_states("all", n=8, seed=0, split="test"))  # 8 clips x 12 states, every scenario
    frames, states = [f for f, _ in pairs], [s for _, s in pairs]
    assert max(len(parse_state(s).objects) for s in states) == 3  # includes the most crowded frames
    captioner = Captioner.from_pretrained(SHIPPED, device="cpu")
    assert type(captioner.model).__name__ == "BlipForConditionalGeneration"
    predicted = captioner.caption(frames)
    wrong = [(p, s) for p, s in zip(predicted, states) if p != s]
    assert len(wrong) <= 1, wrong[:3]  # >= 99% of 96 frames


def test_legacy_layout_with_preprocessor_config(tiny_blip_dir, tmp_path):
    """Hub checkpoints (e.g. Salesforce/blip-image-captioning-base) keep the image processor in
    preprocessor_config.json and name the fast/torchvision class; the adapter still loads the PIL one."""
    legacy = tmp_path / "legacy"
    shutil.copytree(tiny_blip_dir, legacy)
    processor_config = json.loads((legacy / "processor_config.json").read_text())
    image_config = {
        **processor_config["image_processor"],
        "processor_class": "BlipProcessor",
        "image_processor_type": "BlipImageProcessor",
    }
    (legacy / "preprocessor_config.json").write_text(json.dumps(image_config))
    (legacy / "processor_config.json").unlink()
    captioner = Captioner.from_pretrained(legacy, device="cpu")
    assert type(captioner.processor.image_processor).__name__ == "BlipImageProcessorPil"
    assert captioner.caption(_frames(2)) == Captioner.from_pretrained(tiny_blip_dir, device="cpu").caption(
        _frames(2)
    )
