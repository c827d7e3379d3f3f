package tokenizer

// postProcessor adds the special tokens of a single sequence (encode with addSpecial).
type postProcessor interface {
	process(ids []int32) []int32
}

// templateProcessor is "TemplateProcessing" for a single sequence: a list of special tokens and
// the sequence, e.g. "<s> $A".
type templateProcessor struct {
	before, after []int32 // ids around the sequence
}

func (p templateProcessor) process(ids []int32) []int32 {
	if len(p.before) == 0 && len(p.after) == 0 {
		return ids
	}
	out := make([]int32, 0, len(p.before)+len(ids)+len(p.after))
	out = append(out, p.before...)
	out = append(out, ids...)
	return append(out, p.after...)
}

// sequenceProcessor applies processors in order.
type sequenceProcessor []postProcessor

func (seq sequenceProcessor) process(ids []int32) []int32 {
	for _, p := range seq {
		ids = p.process(ids)
	}
	return ids
}
