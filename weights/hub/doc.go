// Package hub owns finding and fetching model folders by Hugging Face name. Resolve turns what a user
// gives as --model into a folder: an existing local folder as it is, else the snapshot of ORG/NAME
// (at a branch, tag or commit: ORG/NAME@REVISION) in the Hugging Face cache that transformers, vLLM
// and huggingface_hub share, else an error that says where it looked and how to fetch the model. Pull
// fetches what gollm needs of a model from the hub's HTTP API into that same cache: resumable,
// several files at once, each checked against the hub's checksum before it appears. List reads the
// cache back.
//
//	dir, err := hub.Resolve("meta-llama/Llama-3.2-1B-Instruct")
//	if errors.Is(err, hub.ErrNotCached) {
//		dir, err = hub.Pull(ctx, "meta-llama/Llama-3.2-1B-Instruct", hub.PullOptions{Progress: os.Stderr})
//	}
//
// The cache layout is huggingface_hub's: under the cache folder (HF_HUB_CACHE, else $HF_HOME/hub,
// else ~/.cache/huggingface/hub) each model has a folder models--ORG--NAME holding blobs/ (the files'
// contents, named by their ETag: the sha256 of a Git LFS file, the Git blob id of another),
// snapshots/COMMIT/ (the files by name, as relative symbolic links into blobs/) and refs/ (a file per
// branch or tag holding the commit it pointed at when it was fetched). The environment variables
// huggingface_hub reads are honoured: HF_HUB_CACHE, HF_HOME, HF_HUB_OFFLINE, HF_TOKEN (and the token
// file $HF_HOME/token) and HF_ENDPOINT.
//
// This package finds and fetches files only: it must not parse or run models (package weights reads
// the folder), and it writes nothing outside the cache folder.
package hub
