"""Export to Hugging Face transformers: a fiblab model as a `LlamaForCausalLM` with equal logits.

The architecture maps one-to-one (pre-norm RMSNorm, rotate-half RoPE θ=1e4 at positions 0..T−1,
GQA, SwiGLU, tied embeddings, no biases), so a **dense** model becomes a plain Llama checkpoint
that transformers loads with no custom code.  A **sparse** model keeps the Llama weights and
swaps the attention: its config.json says ``"attn_implementation": "fiblab_sparse"`` and carries
the lab's settings in a ``"fiblab"`` entry (window, base, rungs, rounding, per-layer α, reach,
rung policy, path); importing this module registers ``fiblab_sparse`` with transformers'
`AttentionInterface`, which runs `lab.sparse.attention.sparse_attention`.  A learned-α model exports
its current α as fixed values (read on the interpolated path, as it trained).

    from lab.publish.hf import save_hf, load_hf
    save_hf(model, "export/", tokenizer_file="runs/x/tokenizer.json")
    hf = load_hf("export/")                     # any process: needs only `import lab.publish.hf`
    # or: import lab.publish.hf; AutoModelForCausalLM.from_pretrained("export/")
    AutoTokenizer.from_pretrained("export/")    # offline, eos "<|endoftext|>"

Logits equal fiblab's to ≤ 1e-4 in float32.  In bf16 / fp16 they differ slightly: HF's RMSNorm
normalises in float32, fiblab's in the input dtype.  The sparse attention is causal by
construction and takes no padding mask: run unpadded batches (padded positions raise a
ValueError; generate with a KV cache works, each cached step re-reading the whole cache, O(T)
per token).  Weight names:

    embed → model.embed_tokens            blocks.i.attn.{q,k,v,o}_proj → layers.i.self_attn.*
    blocks.i.attn_norm → input_layernorm  blocks.i.ffn_norm → post_attention_layernorm
    blocks.i.ffn.{gate,up,down} → layers.i.mlp.{gate,up,down}_proj    norm → model.norm

transformers is optional (``pip install 'fiblab[hf]'``): it is imported on use, and at import
of this module only to register the attention when it is installed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

from lab.data.tokenizer import EOT
from lab.ladder.offsets import Ladder
from lab.lm.model import FibLM
from lab.lm.modelconfig import ModelConfig
from lab.publish.pretrained import check_target
from lab.sparse.attention import sparse_attention
from lab.util.files import atomic_path

ATTN_NAME = "fiblab_sparse"
FORMAT_VERSION = 1
_INSTALL = "pip install 'fiblab[hf]'"


def _transformers():
    """The transformers module, or a ValueError naming the install."""
    try:
        import transformers
    except ImportError:
        raise ValueError(
            f"exporting to Hugging Face needs the transformers package: {_INSTALL}"
        ) from None
    return transformers


# --------------------------------------------------------------------------------------------
# the config
# --------------------------------------------------------------------------------------------
def sparse_spec(cfg: ModelConfig, alphas: Sequence[float] | None = None) -> dict:
    """The ``fiblab`` entry of a sparse export's config.json: what `fiblab_sparse` reads.

    ``alphas`` per-layer α (a trained model's ``model.alphas()``); default the schedule's, for
    a learned schedule as a fresh model's float32 θ holds it."""
    if cfg.attention != "sparse":
        raise ValueError("sparse_spec needs a sparse model; a dense one exports as plain Llama")
    if cfg.path == "blur":
        raise ValueError(
            "path='blur' (the retrieval probe's blur gather) has no Hugging Face export: "
            "rebuild the model with path='auto' to export it"
        )
    alphas = [float(a) for a in (cfg.start_alphas() if alphas is None else alphas)]
    if len(alphas) != cfg.n_layers or not all(math.isfinite(a) for a in alphas):
        raise ValueError(f"alphas={alphas} must be {cfg.n_layers} finite values, one per layer")
    path = "interp" if cfg.interpolated else ("shift" if cfg.path == "auto" else cfg.path)
    return {
        "version": FORMAT_VERSION,
        "alphas": alphas,
        "window": cfg.window,
        "base": cfg.base if isinstance(cfg.base, str) else [float(f) for f in cfg.base],
        "rungs": cfg.rungs,
        "rounding": cfg.rounding,
        "reach": cfg.rung_reach,
        "rung_policy": cfg.rung_policy,
        "path": path,
        "schedule": cfg.schedule if isinstance(cfg.schedule, str) else "custom",
    }


def llama_config(cfg: ModelConfig, alphas: Sequence[float] | None = None):
    """The `transformers.LlamaConfig` of a fiblab config (sparse: with the ``fiblab`` entry and
    ``fiblab_sparse`` attention; ``alphas`` as in `sparse_spec`)."""
    tf = _transformers()
    extra = {}
    if cfg.attention == "sparse":
        register_attention()
        extra = {"fiblab": sparse_spec(cfg, alphas), "attn_implementation": ATTN_NAME}
    return tf.LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.ffn_hidden,  # int(d·ratio) rounded up to even, as lab.lm.model
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim,
        hidden_act="silu",
        max_position_embeddings=cfg.seq_len,
        rms_norm_eps=cfg.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        **extra,
    )


# --------------------------------------------------------------------------------------------
# the weights
# --------------------------------------------------------------------------------------------
def llama_state_dict(model: FibLM) -> dict[str, torch.Tensor]:
    """fiblab's weights under Llama's names (lm_head is tied to the embedding: not listed)."""
    sd = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.norm.weight}
    for i, b in enumerate(model.blocks):
        p = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + f"self_attn.{name}.weight"] = getattr(b.attn, name).weight
        sd[p + "mlp.gate_proj.weight"] = b.ffn.gate.weight
        sd[p + "mlp.up_proj.weight"] = b.ffn.up.weight
        sd[p + "mlp.down_proj.weight"] = b.ffn.down.weight
        sd[p + "input_layernorm.weight"] = b.attn_norm.weight
        sd[p + "post_attention_layernorm.weight"] = b.ffn_norm.weight
    return {k: v.detach() for k, v in sd.items()}


def to_llama(model: FibLM):
    """A `LlamaForCausalLM` with the model's weights (copies, same dtype and device) in eval
    mode; a sparse model gets `fiblab_sparse` attention with its current per-layer α."""
    tf = _transformers()
    if not isinstance(model, FibLM):
        raise ValueError(f"to_llama needs a fiblab FibLM; got {type(model).__name__}")
    cfg = model.cfg
    alphas = model.alphas() if cfg.attention == "sparse" else None
    weight = model.embed.weight
    hf = tf.LlamaForCausalLM(llama_config(cfg, alphas)).to(device=weight.device, dtype=weight.dtype)
    missing, unexpected = hf.load_state_dict(llama_state_dict(model), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"Llama weight mapping is off: missing {missing}, extra {unexpected}")
    if hf.lm_head.weight.data_ptr() != hf.model.embed_tokens.weight.data_ptr():
        raise RuntimeError("the exported lm_head is not tied to the embedding")
    return hf.eval()


# --------------------------------------------------------------------------------------------
# the sparse attention inside transformers
# --------------------------------------------------------------------------------------------
def fiblab_sparse_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """transformers' attention-function convention: query (B, H, q, D), key / value
    (B, KV, k, D) with RoPE applied and the KV cache already appended (q < k while generating);
    returns ((B, q, H, D), None).  GQA k / v go in unrepeated (sparse_attention reads KV head
    h // (H / KV), as `repeat_kv` would lay them out).  With a cache the q new queries sit at
    positions k − q..k − 1: they are placed there after zero rows (every query row is computed
    on its own, so the zero rows only cost time) and the last q output rows kept."""
    spec = getattr(module.config, "fiblab", None)
    if not isinstance(spec, dict):
        raise ValueError(
            f"attn_implementation={ATTN_NAME!r} needs the config's 'fiblab' entry: "
            f"load a checkpoint written by lab.publish.hf.save_hf"
        )
    if attention_mask is not None:
        raise ValueError(
            f"{ATTN_NAME} attention is causal by construction and takes no attention mask: "
            f"pass unpadded inputs"
        )
    if kwargs.get("dropout", 0.0):
        raise ValueError(f"{ATTN_NAME} attention has no dropout: set attention_dropout=0")
    B, H, q_len, D = query.shape  # (B, H, q, D)
    kv_len = key.shape[2]  # key (B, KV, k, D)
    pos = kwargs.get("position_ids")  # (B or 1, q): RoPE's positions, already applied
    if isinstance(pos, torch.Tensor) and pos.dim() == 2 and pos.shape[-1] == q_len:
        want = torch.arange(kv_len - q_len, kv_len, device=pos.device, dtype=pos.dtype)
        if not bool((pos == want).all()):
            raise ValueError(
                f"{ATTN_NAME} attention needs each sequence at positions 0..T-1 with no "
                f"padding (got position_ids {pos[0].tolist()[:8]}...): pass unpadded inputs "
                f"without an attention_mask that has zeros"
            )
    if q_len < kv_len:
        pad = query.new_zeros(B, H, kv_len - q_len, D)
        query = torch.cat([pad, query], dim=2)  # (B, H, k, D)
    reach = int(spec["reach"])
    if spec["rung_policy"] == "recompute":
        reach = max(reach, kv_len)  # as model.with_seq_len(T) under recompute
    base = spec["base"] if isinstance(spec["base"], str) else tuple(spec["base"])
    y = sparse_attention(
        query,
        key,
        value,
        alpha=float(spec["alphas"][module.layer_idx]),
        ladder=Ladder(
            int(spec["window"]),
            base=base,
            rungs=int(spec["rungs"]),
            rounding=spec["rounding"],
            reach=reach,
        ),
        path=spec["path"],
        scale=scaling,
    )  # (B, H, k, D)
    return y[:, :, kv_len - q_len :].transpose(1, 2).contiguous(), None  # (B, q, H, D)


def register_attention() -> None:
    """Register `fiblab_sparse_attention` as ``attn_implementation="fiblab_sparse"``."""
    _transformers().AttentionInterface.register(ATTN_NAME, fiblab_sparse_attention)


# --------------------------------------------------------------------------------------------
# saving and loading
# --------------------------------------------------------------------------------------------
def save_hf(model: FibLM, out_dir, tokenizer_file=None) -> Path:
    """Write a transformers checkpoint of ``model`` to ``out_dir`` (config.json,
    model.safetensors, generation_config.json) and, given ``tokenizer_file`` (a tokenizers
    JSON), the tokenizer as a `PreTrainedTokenizerFast` (tokenizer.json, tokenizer_config.json;
    eos "<|endoftext|>" when it has one).  Returns the folder."""
    tf = _transformers()
    out = Path(out_dir)
    check_target(out, lambda doc: doc.get("model_type") == "llama", "transformers export")
    hf = to_llama(model)
    tok = None
    if tokenizer_file is not None:
        tok = _fast_tokenizer(tf, Path(tokenizer_file), model.cfg.vocab_size)
        if tok.eos_token_id is not None:
            hf.config.eos_token_id = tok.eos_token_id
            hf.generation_config.eos_token_id = tok.eos_token_id
    out.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(out, safe_serialization=True)
    if model.cfg.attention == "sparse":  # save_pretrained drops the attention choice
        cfg_path = out / "config.json"
        data = json.loads(cfg_path.read_text(encoding="utf-8"))
        data["attn_implementation"] = ATTN_NAME
        with atomic_path(cfg_path) as tmp:
            tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if tok is not None:
        tok.save_pretrained(out)
    return out


def _fast_tokenizer(tf, path: Path, vocab_size: int):
    if not path.is_file():
        raise ValueError(f"tokenizer file {str(path)!r} does not exist; give a tokenizer.json")
    from tokenizers import Tokenizer

    try:
        raw = Tokenizer.from_file(str(path))
    except Exception as e:
        raise ValueError(f"tokenizer file {str(path)!r} is not a tokenizers JSON ({e})") from None
    if raw.get_vocab_size() > vocab_size:
        raise ValueError(
            f"tokenizer {str(path)!r} has {raw.get_vocab_size()} tokens but the model's "
            f"vocab_size is {vocab_size}: export with the tokenizer the run trained with"
        )
    eos = EOT if raw.token_to_id(EOT) is not None else None
    return tf.PreTrainedTokenizerFast(tokenizer_object=raw, eos_token=eos)


def load_hf(path):
    """`LlamaForCausalLM.from_pretrained(path)` with `fiblab_sparse` registered (eval mode)."""
    tf = _transformers()
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"{str(path)!r} holds no config.json: give a folder written by save_hf")
    register_attention()
    return tf.LlamaForCausalLM.from_pretrained(path).eval()


try:  # importing lab.publish.hf registers the attention, so from_pretrained finds it in any process
    register_attention()
except ValueError:  # transformers not installed: the functions above say how to install it
    pass
