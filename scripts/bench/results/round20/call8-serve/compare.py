#!/usr/bin/env python3
"""Compares the GPU's and the CPU's answers of round20-serve-check.sh: the echoed prompt's and the
generated tokens' logprobs (token_logprobs), prompt_logprobs, texts, and the logit_bias completion."""
import json
import os

d = os.path.dirname(os.path.abspath(__file__))
load = lambda name: json.load(open(os.path.join(d, name)))
gpu, cpu = load("echo-cuda.json")["choices"][0], load("echo-cpu.json")["choices"][0]
print("texts equal:", gpu["text"] == cpu["text"], repr(gpu["text"]))
gl, cl = gpu["logprobs"], cpu["logprobs"]
print("tokens equal:", gl["tokens"] == cl["tokens"], len(gl["tokens"]), "tokens")
diffs = [abs(a - b) for a, b in zip(gl["token_logprobs"], cl["token_logprobs"]) if a is not None]
print("token_logprobs: first null on both:", gl["token_logprobs"][0] is None and cl["token_logprobs"][0] is None,
      "max |gpu - cpu| %.3g, mean %.3g" % (max(diffs), sum(diffs) / len(diffs)))
gp, cp = gpu["prompt_logprobs"], cpu["prompt_logprobs"]
pd, same_top = [], 0
for a, b in zip(gp[1:], cp[1:]):
    ka, kb = list(a), list(b)
    pd.append(abs(a[ka[0]]["logprob"] - b[kb[0]]["logprob"]))
    same_top += ka == kb
print("prompt_logprobs: %d entries, first null on both: %s, max |gpu - cpu| %.3g, same ids in the same order at %d/%d"
      % (len(gp), gp[0] is None and cp[0] is None, max(pd), same_top, len(gp) - 1))
bg, bc = load("bias-cuda.json")["choices"][0]["text"], load("bias-cpu.json")["choices"][0]["text"]
print("logit_bias texts: gpu %r cpu %r" % (bg, bc))
