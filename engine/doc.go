// Package engine owns a running model: requests enter through Add, one goroutine runs the step loop
// (schedule, build the model's flat step, forward, sample, postprocess) and outputs leave through
// per-request streams. It owns sampling (sampler.go), stop conditions and incremental detokenization
// (text.go), and the loop's state (the scheduler, the KV block pool, every request's sampler); it
// must not know about HTTP, command-line flags or how the model computes.
//
// The model and tokenizer enter through two small interfaces, Model and Tokenizer, which
// *model.Model and *tokenizer.Tokenizer satisfy:
//
//	e, err := engine.New(m, tok, engine.Config{EOSTokenIDs: folder.Generation.EOSTokenIDs})
//	defer e.Close(ctx)
//	params := engine.DefaultSampling(folder.Generation)
//	params.Temperature = 0 // greedy
//	s, err := e.Add(ctx, engine.Request{PromptIDs: tok.Encode("Hello", true), MaxTokens: 32, Sampling: params})
//	for {
//		out, err := s.Recv(ctx)
//		if err == io.EOF {
//			break
//		}
//		fmt.Print(out.Text) // out.TokenIDs, out.Logprobs, out.FinishReason, out.Usage
//	}
//
// Sampling follows vLLM: penalties (repetition on prompt and output, presence and frequency on the
// output), temperature, min-p, top-k, top-p, then a draw, so a seed gives the same tokens whatever else
// shares the batch. Logprobs are those of the raw logits. Where the draw happens depends on the step:
// when no sequence needing a token has penalties, logprobs or a logit bias, a PickModel picks on its device (the
// argmax when all are greedy, else a filtered draw from a uniform derived from (seed, output index)) and
// only token ids come back; otherwise the logits come to the host, requests without penalties draw with
// the same (seed, output index) rule (model.SampleLogits, the CPU twin of the device kernel) and requests
// with penalties draw from their own PCG stream.
//
// Structured output (Request.Constraint, compiled by package engine/constraint) masks each draw to
// the tokens the constraint allows, EOS and stop token ids only once it is complete. On a MaskModel
// (*model.Model) the masks enter the model's pick (model.SampleParams.Mask: a kernel sets the logits
// left out to −∞ before the pick on the GPU), so a constrained request keeps its steps on the device
// and pipelined: a step is begun (MaskModel.Begin), its masks are computed while it runs, once the
// tokens they depend on are read, and then committed. Otherwise, or when the request needs its logits
// on the host anyway (logprobs, penalties), it draws on the host with the same mask
// (model.MaskLogits), computed while the model runs the step. Its logprobs are those of the raw
// logits, as vLLM's by default.
//
// Prompt logprobs (Request.PromptLogprobs, vLLM's prompt_logprobs) need the logits of every prompt
// position: such a request takes no prefix-cache hits, its prompt's steps bring those rows to the host
// (in chunks within Config.MaxPromptLogitRows a step), and the log-probabilities, with the prompt's
// text piece by piece, go out once with the first generated token (Output.PromptLogprobs).
//
// Steps are pipelined where the device picks: while step N runs, the loop plans step N+1
// (scheduler.ScheduleNext: each decoding sequence's next token is the one step N is picking; prefill
// chunks and admissions as a plain step would plan them) and queues it with its decodes' input tokens
// fed from N's picks on the device (model.Step.InputFrom); then it reads N's tokens, updates the books,
// detokenizes and streams while N+1 computes. A sequence that step N finishes (a stop token or string)
// has computed one token too many in N+1, which is dropped. Preemption and steps whose logits go to the
// host wait for a plain step.
//
// Stop conditions: EOS ids (the model config's and Config.EOSTokenIDs, unless IgnoreEOS), stop token
// ids, stop strings matched on the decoded text (cut from the returned text; text that could begin a
// stop string is held back while streaming), MaxTokens and the context length (MaxModelLen).
//
// Cancelling the context given to Add aborts the request; its KV blocks are freed before the step
// that follows the cancellation (context.AfterFunc tells the loop, so a step costs what was
// cancelled, not a check of every request). Close stops intake and drains, or aborts when its own
// context ends.
package engine
