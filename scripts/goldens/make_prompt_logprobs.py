#!/usr/bin/env python3
"""Write HF transformers' prompt logprobs for the committed golden checkpoints (model/testdata/golden).

Run on a machine with PyTorch and transformers (the device machine has torch 2.11, transformers 5.17),
from the repository root:

    python3 scripts/goldens/make_prompt_logprobs.py model/testdata/golden

For each case folder (config.json, model.safetensors, golden.json) it loads the checkpoint exactly as
make_goldens.py checks it (from_pretrained in the case's dtype, eager attention, then .float(), on the
CPU in IEEE float32) and, for each golden prompt of at least two tokens, runs one forward pass over the
whole prompt and takes log_softmax of the logits in float64. For every prompt position i >= 1 it
records what vLLM's prompt_logprobs reports for token i given tokens 0..i-1: the token's logprob, its
rank (1 + the number of tokens with a larger logprob), and the TOP most likely tokens (ids and
logprobs, best first, ties by lower id). The file is prompt_logprobs.json beside golden.json.
"""

import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

TOP = 5
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def case_logprobs(d):
    golden = json.load(open(os.path.join(d, "golden.json")))
    model = AutoModelForCausalLM.from_pretrained(d, dtype=DTYPES[golden["dtype"]],
                                                 attn_implementation="eager").float().eval()
    prompts = []
    for rec in golden["prompts"]:
        ids = rec["prompt_ids"]
        if len(ids) < 2:
            continue
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].double()
        lp = torch.log_softmax(logits, dim=-1)
        entries = []
        for i in range(1, len(ids)):
            row = lp[i - 1]
            tok = ids[i]
            rank = 1 + int((row > row[tok]).sum())
            # best first, ties by lower id: sort by (-logprob, id)
            order = sorted(range(row.shape[0]), key=lambda j: (-float(row[j]), j))[:TOP]
            entries.append(dict(logprob=float(row[tok]), rank=rank, top_ids=order,
                                top_logprobs=[float(row[j]) for j in order]))
        prompts.append(dict(prompt_ids=ids, entries=entries))
    return dict(case=golden["case"], dtype=golden["dtype"], torch_version=torch.__version__,
                transformers_version=transformers.__version__, top=TOP, prompts=prompts)


def main():
    root = sys.argv[1]
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.exists(os.path.join(d, "golden.json")):
            continue
        out = case_logprobs(d)
        with open(os.path.join(d, "prompt_logprobs.json"), "w") as f:
            json.dump(out, f, separators=(",", ":"))
        n = sum(len(p["entries"]) for p in out["prompts"])
        print(f"{name}: {n} prompt positions", flush=True)


if __name__ == "__main__":
    main()
