#!/usr/bin/env python3
"""Read a Hugging Face cache that `gollm pull` wrote with huggingface_hub's own functions, and fail on
any mismatch: the proof that gollm's cache layout is the real one, so that transformers and vLLM find
what gollm pulled (and gollm what they did).

    python3 scripts/hub/check_cache.py CACHE_DIR [ORG/NAME ...] [--manifest FILE] [--no-transformers] [--self-test]

For each model (every model in the manifest when no name is given):
  * scan_cache_dir(CACHE_DIR) reports no warning, and lists the model with the manifest's commits,
    refs and files; every file is a relative symbolic link to blobs/ETAG, whose content's sha256
    (LFS files) or Git blob id (other files) is ETAG and whose size is the manifest's;
  * no blobs/*.incomplete file is left;
  * for each ref and each commit, snapshot_download(local_files_only=True) returns the snapshot
    folder, and for each file try_to_load_from_cache and hf_hub_download(local_files_only=True)
    return its path in the snapshot;
  * when transformers is installed (and --no-transformers is not given), AutoConfig, AutoTokenizer
    and AutoModelForCausalLM load each ref offline, and the model generates a few tokens.
The manifest (written by `go test ./weights/hub -run TestWriteCacheForPython -args -out DIR`) names
the commits, refs and files expected; without it the script checks the cache against itself.
--self-test then damages copies of the cache (a flipped byte in a blob, a deleted blob, a ref naming
a missing commit) and requires each to be caught. HF_HUB_OFFLINE=1 is set, so nothing reaches the
network. Exit status 0: all checks passed.
"""

import argparse
import hashlib
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import huggingface_hub  # noqa: E402  (after HF_HUB_OFFLINE is set)
from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download, try_to_load_from_cache  # noqa: E402

failures = []
quiet = False  # set while the self-test checks damaged copies


def fail(msg):
    failures.append(msg)
    if not quiet:
        print("FAIL: " + msg)


def ok(msg):
    if not quiet:
        print("ok: " + msg)


def content_id(path, etag):
    """The hash that names a blob: sha256 for a 64-digit ETag, the Git blob id for a 40-digit one."""
    h = hashlib.sha256() if len(etag) == 64 else hashlib.sha1()
    if len(etag) == 40:
        h.update(b"blob %d\x00" % os.path.getsize(path))
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_model(cache_dir, repo_id, info, expected):
    repos = [r for r in info.repos if r.repo_id == repo_id and r.repo_type == "model"]
    if len(repos) != 1:
        fail("%s: scan_cache_dir lists it %d times" % (repo_id, len(repos)))
        return
    repo = repos[0]
    revisions = {rev.commit_hash: rev for rev in repo.revisions}
    if expected is None:  # check the cache against itself
        expected = {"refs": {}, "commits": {}}
        for commit, rev in revisions.items():
            for ref in rev.refs:
                expected["refs"][ref] = commit
            expected["commits"][commit] = {
                os.path.relpath(str(f.file_path), str(rev.snapshot_path)): {
                    "etag": os.path.basename(str(f.blob_path)), "size": f.size_on_disk}
                for f in rev.files}
    if set(revisions) != set(expected["commits"]):
        fail("%s: scan_cache_dir finds commits %s, want %s" % (repo_id, sorted(revisions), sorted(expected["commits"])))
    blobs_dir = os.path.join(str(repo.repo_path), "blobs")
    for commit, want_files in sorted(expected["commits"].items()):
        rev = revisions.get(commit)
        if rev is None:
            continue
        want_refs = {ref for ref, c in expected["refs"].items() if c == commit}
        if set(rev.refs) != want_refs:
            fail("%s@%s: refs %s, want %s" % (repo_id, commit, sorted(rev.refs), sorted(want_refs)))
        files = {os.path.relpath(str(f.file_path), str(rev.snapshot_path)): f for f in rev.files}
        if set(files) != set(want_files):
            fail("%s@%s: files %s, want %s" % (repo_id, commit, sorted(files), sorted(want_files)))
        for name, want in sorted(want_files.items()):
            f = files.get(name)
            if f is None:
                continue
            where = "%s@%s/%s" % (repo_id, commit[:12], name)
            target = os.readlink(str(f.file_path)) if os.path.islink(str(f.file_path)) else None
            if target is None or os.path.isabs(target):
                fail("%s: not a relative symbolic link (%r)" % (where, target))
            if os.path.realpath(str(f.blob_path)) != os.path.realpath(os.path.join(blobs_dir, want["etag"])):
                fail("%s: blob %s, want blobs/%s" % (where, f.blob_path, want["etag"]))
            if f.size_on_disk != want["size"]:
                fail("%s: size %d, want %d" % (where, f.size_on_disk, want["size"]))
            got = content_id(str(f.blob_path), want["etag"])
            if got != want["etag"]:
                fail("%s: content hash %s, want %s" % (where, got, want["etag"]))
        ok("%s@%s: %d files, refs %s, %d bytes" % (repo_id, commit[:12], len(files), sorted(rev.refs), rev.size_on_disk))
        for revision in [commit] + sorted(want_refs):
            snap = snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True)
            if os.path.realpath(snap) != os.path.realpath(str(rev.snapshot_path)):
                fail("%s@%s: snapshot_download gives %s, want %s" % (repo_id, revision, snap, rev.snapshot_path))
            for name in sorted(want_files):
                want_path = os.path.join(str(rev.snapshot_path), name)
                cached = try_to_load_from_cache(repo_id, name, cache_dir=cache_dir, revision=revision)
                if not isinstance(cached, str) or os.path.realpath(cached) != os.path.realpath(want_path):
                    fail("%s@%s/%s: try_to_load_from_cache gives %r" % (repo_id, revision, name, cached))
                got = hf_hub_download(repo_id, name, revision=revision, cache_dir=cache_dir, local_files_only=True)
                if os.path.realpath(got) != os.path.realpath(want_path):
                    fail("%s@%s/%s: hf_hub_download gives %s" % (repo_id, revision, name, got))
            ok("%s@%s: snapshot_download, try_to_load_from_cache and hf_hub_download find every file" % (repo_id, revision))
    incomplete = [n for n in os.listdir(blobs_dir) if n.endswith(".incomplete")]
    if incomplete:
        fail("%s: partial downloads left: %s" % (repo_id, incomplete))


def check_transformers(cache_dir, repo_id, expected):
    try:
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        print("note: transformers is not installed; its check is skipped")
        return
    try:
        import torch
    except ImportError:
        torch = None
    if expected is None:
        revisions = [None]  # the default branch
    elif expected["refs"]:
        revisions = sorted(expected["refs"])
    else:
        revisions = sorted(expected["commits"])
    for revision in revisions:
        where = "%s@%s" % (repo_id, revision or "main")
        try:
            kw = dict(revision=revision, cache_dir=cache_dir, local_files_only=True)
            config = AutoConfig.from_pretrained(repo_id, **kw)
            tok = AutoTokenizer.from_pretrained(repo_id, **kw)
            msg = "config %s, tokenizer of %d tokens" % (config.architectures, len(tok))
            if torch is not None:
                model = AutoModelForCausalLM.from_pretrained(repo_id, **kw)
                ids = tok("func main() {", return_tensors="pt").input_ids
                out = model.generate(ids, max_new_tokens=5, do_sample=False)
                msg += ", model generates %r" % tok.decode(out[0][ids.shape[1]:])
            ok("transformers %s loads %s: %s" % (transformers.__version__, where, msg))
        except Exception as e:  # any failure to load is a mismatch
            fail("transformers cannot load %s: %s: %s" % (where, type(e).__name__, e))


def run_checks(cache_dir, models, manifest, with_transformers):
    """Runs every check; returns the failures."""
    del failures[:]
    if not quiet:
        print("huggingface_hub %s, cache %s" % (huggingface_hub.__version__, cache_dir))
    info = scan_cache_dir(cache_dir)
    for w in info.warnings:
        fail("scan_cache_dir: %s" % w)
    for repo_id in models:
        expected = manifest["models"].get(repo_id) if manifest else None
        if manifest and expected is None:
            fail("%s is not in the manifest" % repo_id)
            continue
        check_model(cache_dir, repo_id, info, expected)
        if with_transformers:
            check_transformers(cache_dir, repo_id, expected)
    return list(failures)


def self_test(cache_dir, models, manifest):
    """Damages copies of the cache and checks that each damage is caught: the checks can fail."""
    import shutil
    import tempfile

    def repo_dir(model):
        return os.path.join(cache_dir, "models--" + model.replace("/", "--"))

    blobs_dir = os.path.join(repo_dir(models[0]), "blobs")
    blobs = sorted(os.listdir(blobs_dir))
    damages = [
        ("a byte of a blob of %s flipped" % models[0], models[0], lambda d: flip_byte(os.path.join(d, "blobs", blobs[0]))),
        ("a blob of %s deleted" % models[0], models[0], lambda d: os.remove(os.path.join(d, "blobs", blobs[-1]))),
    ]
    with_refs = [m for m in models if os.path.isdir(os.path.join(repo_dir(m), "refs"))]
    if with_refs:
        ref = sorted(os.listdir(os.path.join(repo_dir(with_refs[0]), "refs")))[0]
        damages.append(("refs/%s of %s naming a missing commit" % (ref, with_refs[0]), with_refs[0],
                        lambda d: write(os.path.join(d, "refs", ref), "0" * 40)))
    global quiet
    caught = True
    for what, model, damage in damages:
        tmp = tempfile.mkdtemp()
        try:
            copy = os.path.join(tmp, "cache")
            shutil.copytree(cache_dir, copy, symlinks=True)
            damage(os.path.join(copy, os.path.basename(repo_dir(model))))
            quiet = True
            found = run_checks(copy, models, manifest, False)
            quiet = False
            if found:
                print("ok: self-test: %s is caught: %s" % (what, found[0]))
            else:
                print("FAIL: self-test: %s passed the checks" % what)
                caught = False
        finally:
            quiet = False
            shutil.rmtree(tmp)
    return caught


def flip_byte(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache_dir")
    ap.add_argument("models", nargs="*", metavar="ORG/NAME")
    ap.add_argument("--manifest", help="what the cache must hold (TestWriteCacheForPython writes it)")
    ap.add_argument("--no-transformers", action="store_true", help="skip loading with transformers")
    ap.add_argument("--self-test", action="store_true",
                    help="then damage copies of the cache (a blob's byte, a blob, a ref) and check that each is caught")
    args = ap.parse_args()
    manifest = None
    if args.manifest:
        with open(args.manifest) as f:
            manifest = json.load(f)
    models = args.models or sorted(manifest["models"] if manifest else [])
    if not models:
        ap.error("name a model, or give a --manifest")
    found = run_checks(args.cache_dir, models, manifest, not args.no_transformers)
    if found:
        print("%d check(s) failed" % len(found))
        return 1
    print("all checks passed")
    if args.self_test and not self_test(args.cache_dir, models, manifest):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
