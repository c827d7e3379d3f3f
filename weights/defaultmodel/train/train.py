#!/usr/bin/env python3
"""Train gollm's embedded default model: a tiny LLaMA on the Go standard library's sources.

What it does, in one run on one GPU (8 minutes on an H100, 7 of them training):
  1. reads a tar.gz of Go source files (see "Data" below) and splits it by file into train and
     validation (a file is held out when the SHA-256 of its path falls in the first 2% of values);
  2. trains a byte-level BPE tokenizer (HF tokenizers) with the special tokens below and a
     TemplateProcessing post-processor that puts <|bos|> in front of every encoding;
  3. trains a LlamaForCausalLM (GQA: 6 query heads over 2 KV heads, tied embeddings) on the training
     files, each one encoded as <|bos|> file <|eos|>, under bf16 autocast and torch.compile for a fixed
     time budget (random 1024-token windows of the concatenation, AdamW, warm-up then cosine decay over
     the budget), keeping the weights with the best validation loss (checked every 1000 steps);
  4. saves the HuggingFace way into OUT/files: config.json, generation_config.json, model.safetensors
     (bf16), tokenizer.json, tokenizer_config.json (with a chat template);
  5. writes OUT/train_log.json (settings, step count, losses) and the goldens OUT/greedy.json:
     transformers' greedy continuation, in float32 math on the CPU from the saved bf16 checkpoint, of
     five Go prompts, with the prompt ids, the generated ids, the top-20 logits of the first step and
     the top-1/top-2 margin of every step;
  6. writes OUT/samples.json: sampled completions of "func " (temperature 0.8) for a quality figure.

Data: the .go files of the Go distribution's src/ tree (BSD licence, see ../files/NOTICE), without testdata/
and vendor/ folders, folders starting with "_" or ".", generated files ("// Code generated ... DO NOT
EDIT.") and files over 100 kB; _test.go files are included. The tar.gz (about 10 MB, from Go 1.26.8)
is made on the development machine, in the repository's root, with:

    python3 weights/defaultmodel/train/train.py --list-data /usr/local/go/src > /tmp/gosrc.txt
    mkdir -p .train && tar czf .train/gosrc.tar.gz -C /usr/local/go/src -T /tmp/gosrc.txt

(.train/ is ignored by git through .git/info/exclude and travels to the device as a carried path.)

Run on the device machine (torch 2.11, transformers 5.17, tokenizers 0.23):

    python3 weights/defaultmodel/train/train.py --data .train/gosrc.tar.gz --out /tmp/dm

and copy its results into the package (files/NOTICE is written by hand, not by this script):

    cp /tmp/dm/files/* weights/defaultmodel/files/
    cp /tmp/dm/greedy.json weights/defaultmodel/testdata/
    cp /tmp/dm/train_log.json /tmp/dm/samples.json weights/defaultmodel/train/

Training is timed, not counted in steps, so a rerun gives different weights: commit the checkpoint and
greedy.json of the same run together (the Go parity test compares them).

Nothing here is needed at gollm's run time; the Go package only embeds what this script wrote.
"""

import argparse
import hashlib
import inspect
import json
import math
import os
import re
import sys
import tarfile
import time

SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"]
PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"

# A minimal chat format: each message is its role token, a newline, the content and <|eos|>; the
# generation prompt is the assistant's role token. The rendered text carries no <|bos|>: encoding it
# with special tokens (as every encoding here is) puts one in front.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|eos|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

PROMPTS = [
    "func main() {",
    "package main\n\nimport (",
    "// Copyright",
    "func (s *Server) ",
    "for i := 0; i < n; i++ {",
]

GENERATED = re.compile(r"^// Code generated .* DO NOT EDIT\.$", re.M)


def list_data(root):
    """Prints the Go files under root that the training data holds, one relative path a line."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("testdata", "vendor") and not x.startswith((".", "_")))
        for f in sorted(files):
            if not f.endswith(".go"):
                continue
            p = os.path.join(d, f)
            if os.path.getsize(p) > 100_000:
                continue
            with open(p, encoding="utf-8", errors="replace") as fh:
                head = fh.read(2000)
            if GENERATED.search(head):
                continue
            out.append(os.path.relpath(p, root))
    print("\n".join(sorted(out)))


def read_data(path):
    """Returns sorted (name, text) pairs for the .go files in the tar.gz at path."""
    docs = []
    with tarfile.open(path, "r:gz") as tf:
        for m in tf:
            if m.isfile() and m.name.endswith(".go"):
                text = tf.extractfile(m).read().decode("utf-8", errors="replace")
                docs.append((m.name.lstrip("./"), text))
    docs.sort()
    return docs


def is_validation(name, percent):
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return h % 100 < percent


def train_tokenizer(texts, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A {BOS}:1 $B:1",
        special_tokens=[(BOS, bos)],
    )
    return tok


def encode_stream(tok, texts, torch):
    """Encodes each text as <|bos|> text <|eos|> (the post-processor adds the <|bos|>) and concatenates."""
    eos = tok.token_to_id(EOS)
    ids = []
    for enc in tok.encode_batch(texts, add_special_tokens=True):
        ids.extend(enc.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.int64)


def write_tokenizer_files(tok, out_dir, context):
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    added = {}
    for t in SPECIAL_TOKENS:
        added[str(tok.token_to_id(t))] = {
            "content": t, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True,
        }
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": context,
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def make_config(args, tok):
    from transformers import LlamaConfig

    kw = dict(
        vocab_size=tok.get_vocab_size(),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.context,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=True,
        bos_token_id=tok.token_to_id(BOS),
        eos_token_id=tok.token_to_id(EOS),
        pad_token_id=tok.token_to_id(PAD),
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
    )
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": args.rope_theta}
    else:
        kw["rope_theta"] = args.rope_theta
    return LlamaConfig(**kw)


def evaluate(model, stream, context, batch, torch, max_tokens):
    """Mean next-token cross-entropy over consecutive non-overlapping windows of stream."""
    import torch.nn.functional as F

    n = min(len(stream) - 1, max_tokens) // context
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, n, batch):
            rows = range(i, min(n, i + batch))
            x = torch.stack([stream[r * context:(r + 1) * context] for r in rows]).cuda(non_blocking=True)
            y = torch.stack([stream[r * context + 1:(r + 1) * context + 1] for r in rows]).cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1), reduction="sum")
            total += loss.item()
            count += y.numel()
    model.train()
    return total / count, count


def goldens(files_dir, steps, torch):
    """Greedy continuation in float32 math on the CPU from the saved bf16 checkpoint."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = Tokenizer.from_file(os.path.join(files_dir, "tokenizer.json"))
    try:
        hf_tok = AutoTokenizer.from_pretrained(files_dir)
    except Exception as e:  # a check only: the goldens do not depend on it
        print("AutoTokenizer failed:", repr(e), flush=True)
        hf_tok = None
    model = LlamaForCausalLM.from_pretrained(files_dir, dtype=torch.bfloat16, attn_implementation="eager")
    model = model.float().eval()
    out = {
        "about": "transformers greedy continuation (argmax, float32 math on the CPU, bf16 weights widened "
                 "to float32, no KV cache: the full sequence is run at every step, no stop at <|eos|>) "
                 "of each prompt for new_tokens tokens. prompt_ids is tokenizer.json's encoding with "
                 "special tokens (the post-processor's <|bos|> first). top_logits are the 20 largest "
                 "last-position logits before the first generated token; margins[i] is the gap between "
                 "the largest and second largest logit when output_ids[i] was chosen.",
        "new_tokens": steps,
        "prompts": [],
    }
    for prompt in PROMPTS:
        ids = tok.encode(prompt, add_special_tokens=True).ids
        hf_ids = hf_tok(prompt)["input_ids"] if hf_tok is not None else None
        seq = list(ids)
        gen, margins, top = [], [], None
        with torch.no_grad():
            for s in range(steps):
                logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
                v, i = torch.topk(logits, 20)
                if s == 0:
                    top = {"ids": i.tolist(), "logits": v.tolist()}
                nxt = int(i[0])
                margins.append(float(v[0] - v[1]))
                gen.append(nxt)
                seq.append(nxt)
            g = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                               do_sample=False, max_new_tokens=steps, pad_token_id=tok.token_to_id(PAD))
        g = g[0, len(ids):].tolist()
        n = min(len(g), len(gen))
        out["prompts"].append({
            "prompt": prompt,
            "prompt_ids": ids,
            "transformers_tokenizer_ids": hf_ids,
            "output_ids": gen,
            "output_text": tok.decode(gen, skip_special_tokens=False),
            "top_logits": top,
            "margins": margins,
            "generate_agrees": g[:n] == gen[:n],
        })
    try:
        out["chat_template_example"] = hf_tok.apply_chat_template(
            [{"role": "system", "content": "You write Go."}, {"role": "user", "content": "hi"}],
            tokenize=False, add_generation_prompt=True)
    except Exception as e:
        out["chat_template_example"] = "error: " + repr(e)
    return out


def samples(files_dir, n, new_tokens, temperature, torch):
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    tok = Tokenizer.from_file(os.path.join(files_dir, "tokenizer.json"))
    model = LlamaForCausalLM.from_pretrained(files_dir, dtype=torch.bfloat16).float().cuda().eval()
    ids = tok.encode("func ", add_special_tokens=True).ids
    torch.manual_seed(0)
    x = torch.tensor([ids] * n).cuda()
    with torch.no_grad():
        g = model.generate(x, attention_mask=torch.ones_like(x), do_sample=True, temperature=temperature,
                           top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                           pad_token_id=tok.token_to_id(PAD), eos_token_id=tok.token_to_id(EOS))
    texts = []
    for row in g.tolist():
        row = row[len(ids):]
        eos = tok.token_to_id(EOS)
        if eos in row:
            row = row[:row.index(eos)]
        texts.append("func " + tok.decode(row))
    return {"prompt": "func ", "temperature": temperature, "new_tokens": new_tokens,
            "about": "transformers sampling on the GPU, float32, seed 0, no top-k/top-p", "samples": texts}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list-data", metavar="ROOT", help="print the Go files under ROOT the data holds, and exit")
    ap.add_argument("--data", default=".train/gosrc.tar.gz")
    ap.add_argument("--out", default="/tmp/defaultmodel")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--batch", type=int, default=64, help="sequences per step")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=200, help="warm-up steps")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--train-seconds", type=float, default=420, help="time budget for the training loop")
    ap.add_argument("--val-percent", type=int, default=2)
    ap.add_argument("--val-tokens", type=int, default=2_000_000, help="cap on validation tokens")
    ap.add_argument("--select-tokens", type=int, default=200_000,
                    help="validation tokens that choose the weights kept (early stopping)")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="run the model without torch.compile")
    ap.add_argument("--golden-tokens", type=int, default=64)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.list_data:
        list_data(args.list_data)
        return

    t_start = time.time()
    import torch
    import torch.nn.functional as F
    import tokenizers
    import transformers
    from transformers import GenerationConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    files_dir = os.path.join(args.out, "files")
    os.makedirs(files_dir, exist_ok=True)
    log = {"settings": vars(args), "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                                "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
           "device": torch.cuda.get_device_name(0)}

    docs = read_data(args.data)
    train_docs = [t for n, t in docs if not is_validation(n, args.val_percent)]
    val_docs = [t for n, t in docs if is_validation(n, args.val_percent)]
    log["data"] = {"files": len(docs), "train_files": len(train_docs), "val_files": len(val_docs),
                   "train_bytes": sum(len(t.encode()) for t in train_docs),
                   "val_bytes": sum(len(t.encode()) for t in val_docs)}
    print("data", log["data"], flush=True)

    t0 = time.time()
    tok = train_tokenizer(train_docs, args.vocab)
    write_tokenizer_files(tok, files_dir, args.context)
    train_ids = encode_stream(tok, train_docs, torch)
    val_ids = encode_stream(tok, val_docs, torch)
    log["tokenizer"] = {"vocab_size": tok.get_vocab_size(), "seconds": round(time.time() - t0, 1),
                        "train_tokens": len(train_ids), "val_tokens": len(val_ids),
                        "train_bytes_per_token": round(log["data"]["train_bytes"] / len(train_ids), 3),
                        "special_token_ids": {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}}
    print("tokenizer", log["tokenizer"], flush=True)

    config = make_config(args, tok)
    model = LlamaForCausalLM(config).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    log["model"] = {"parameters": n_params, "config": json.loads(config.to_json_string())}
    print("parameters", n_params, flush=True)

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if args.compile else model

    train_gpu = train_ids.cuda()
    T, B = args.context, args.batch
    offsets = torch.arange(T + 1, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(args.seed)

    def lr_at(step, frac):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        m = args.min_lr_frac
        return args.lr * (m + (1 - m) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))

    history = []
    best = (float("inf"), -1, None)  # (validation loss on the selection tokens, step, weights)
    step, t_train0 = 0, None
    model.train()
    while True:
        if t_train0 is None and step == 1:
            torch.cuda.synchronize()
            t_train0 = time.time()  # the budget starts after the first (compiling) step
        frac = 0.0 if t_train0 is None else (time.time() - t_train0) / args.train_seconds
        if frac >= 1.0:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, frac)
        starts = torch.randint(0, len(train_gpu) - T - 1, (B,), device="cuda", generator=gen)
        chunk = train_gpu[starts[:, None] + offsets]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(input_ids=x).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0:
            l = loss.item()
            el = 0.0 if t_train0 is None else time.time() - t_train0
            history.append({"step": step, "seconds": round(el, 1), "loss": round(l, 4), "lr": opt.param_groups[0]["lr"]})
            print(f"step {step} t {el:.0f}s loss {l:.4f} lr {opt.param_groups[0]['lr']:.2e}", flush=True)
        if step % 1000 == 0 and step > 0:
            vl, _ = evaluate(model, val_ids, T, 32, torch, args.select_tokens)
            history[-1]["val_loss_select"] = round(vl, 4)
            print(f"  val {vl:.4f}", flush=True)
            if vl < best[0]:
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
        step += 1
    torch.cuda.synchronize()
    train_seconds = time.time() - t_train0
    log["training"] = {"steps": step, "seconds": round(train_seconds, 1),
                       "tokens": step * B * T, "tokens_per_second": round((step - 1) * B * T / train_seconds),
                       "epochs": round(step * B * T / len(train_ids), 2), "history": history}
    print("training", {k: v for k, v in log["training"].items() if k != "history"}, flush=True)

    # Early stopping: with ~100 passes over the data a model this small can start to memorise, so the
    # weights kept are those with the lowest loss on the first select_tokens validation tokens, checked
    # every 1000 steps and at the end.
    final_select, _ = evaluate(model, val_ids, T, 32, torch, args.select_tokens)
    log["training"]["final_val_loss_select"] = round(final_select, 4)
    if best[2] is not None and best[0] < final_select:
        model.load_state_dict(best[2])
        log["training"]["kept_step"] = best[1]
    else:
        log["training"]["kept_step"] = step
    del best
    print("kept weights of step", log["training"]["kept_step"], flush=True)

    val_loss, val_count = evaluate(model, val_ids, T, 32, torch, args.val_tokens)
    train_loss, _ = evaluate(model, train_ids[:val_count + T + 1], T, 32, torch, args.val_tokens)

    model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.token_to_id(BOS), eos_token_id=tok.token_to_id(EOS), pad_token_id=tok.token_to_id(PAD),
        do_sample=True, temperature=0.8, top_k=0, top_p=1.0, max_new_tokens=256)
    model.save_pretrained(files_dir, safe_serialization=True)

    # The saved bf16 checkpoint, widened to float32: the validation loss gollm's float32 math should see.
    saved = LlamaForCausalLM.from_pretrained(files_dir, dtype=torch.bfloat16).float().cuda()
    saved_val, _ = evaluate(saved, val_ids, T, 32, torch, args.val_tokens)
    del saved
    log["eval"] = {"val_loss": round(val_loss, 4), "val_tokens": val_count,
                   "train_loss_same_size": round(train_loss, 4),
                   "val_loss_saved_bf16_checkpoint": round(saved_val, 4),
                   "val_bits_per_byte": round(val_loss / math.log(2) * len(val_ids) / log["data"]["val_bytes"], 4)}
    print("eval", log["eval"], flush=True)

    log["files"] = {f: os.path.getsize(os.path.join(files_dir, f)) for f in sorted(os.listdir(files_dir))}
    log["files_total_bytes"] = sum(log["files"].values())
    print("files", log["files"], "total", log["files_total_bytes"], flush=True)

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    g = goldens(files_dir, args.golden_tokens, torch)
    with open(os.path.join(args.out, "greedy.json"), "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")
    for p in g["prompts"]:
        print("----", repr(p["prompt"]), p["prompt_ids"], "hf tokenizer agrees:",
              p["prompt_ids"] == p["transformers_tokenizer_ids"], "generate agrees:", p["generate_agrees"],
              "min margin: %.4f" % min(p["margins"]), flush=True)
        print(p["prompt"] + p["output_text"], flush=True)
    if args.samples:
        s = samples(files_dir, args.samples, 200, 0.8, torch)
        with open(os.path.join(args.out, "samples.json"), "w") as f:
            json.dump(s, f, indent=1)
            f.write("\n")
        print("==== sample 0\n" + s["samples"][0], flush=True)

    log["total_seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
        f.write("\n")
    print("done in", log["total_seconds"], "s", flush=True)


if __name__ == "__main__":
    main()
