package constraint

import "testing"

// allOfItemsCases: under allOf, each schema's items applies after its own prefixItems, so the
// merged item at each position is the allOf of what each side says of that position.
var allOfItemsCases = []schemaCase{
	{"prefix-and-items", `{"type":"array","allOf":[{"prefixItems":[{"type":"integer"}]},{"items":{"type":"string"}}]}`,
		[]string{`[]`}, []string{`[1]`, `["a"]`, `[1,"a"]`, `["a","b"]`}},
	{"items-and-prefix", `{"allOf":[{"items":{"type":"string"}},{"prefixItems":[{"type":"integer"}]}],"type":"array"}`,
		[]string{`[]`}, []string{`[1]`, `["a"]`, `[1,"a"]`}},
	{"both-and-items", `{"type":"array","allOf":[{"prefixItems":[{"type":"integer"}],"items":{"type":"string"}},{"items":{"type":["integer","string"]}}]}`,
		[]string{`[]`, `[1]`, `[1,"a","b"]`}, []string{`["a"]`, `[1,2]`, `[true]`}},
	{"prefix-lengths", `{"type":"array","allOf":[{"prefixItems":[{"type":"integer"}],"items":{"type":"string"}},{"prefixItems":[{"minimum":0},{"maxLength":1}]}]}`,
		[]string{`[0]`, `[3,"a"]`, `[0,"a","bc"]`}, []string{`[-1]`, `[1,"ab"]`, `[1,"a",2]`, `["a"]`}},
	{"base-prefix-branch-items", `{"type":"array","prefixItems":[{"type":"string"}],"allOf":[{"items":{"maxLength":2}}]}`,
		[]string{`[]`, `["ab"]`, `["ab",1]`, `["a","xy"]`}, []string{`["abc"]`, `["a","xyz"]`, `[1]`}},
	{"items-false", `{"type":"array","allOf":[{"prefixItems":[{"type":"integer"},{"type":"integer"}]},{"prefixItems":[{}],"items":false}]}`,
		[]string{`[]`, `[1]`}, []string{`[1,2]`, `["a"]`}},
	{"anyof-base", `{"type":"array","prefixItems":[{"type":"integer"}],"anyOf":[{"items":{"minimum":5}},{"items":{"type":"string"}}]}`,
		[]string{`[]`, `[5]`, `[7,9]`, `[5,"a"]`}, []string{`[1]`, `["a"]`, `[5,1]`}},
}

// allOfItemsDraft4 are the same rules in draft 4's words (items as a list, additionalItems), which
// the 2020-12 validator does not read.
var allOfItemsDraft4 = []schemaCase{
	{"d4-list-and-items", `{"type":"array","allOf":[{"items":[{"type":"integer"}]},{"items":{"type":"string"}}]}`,
		[]string{`[]`}, []string{`[1]`, `["a"]`, `[1,"a"]`}},
	{"d4-lists", `{"type":"array","allOf":[{"items":[{"type":"integer"}],"additionalItems":{"type":"string"}},{"items":[{"minimum":0},{"maxLength":1}]}]}`,
		[]string{`[0]`, `[3,"a"]`, `[0,"a","bc"]`}, []string{`[-1]`, `[1,"ab"]`, `[1,"a",2]`}},
	{"d4-list-and-prefix", `{"type":"array","allOf":[{"items":[{"type":"integer"}],"additionalItems":false},{"prefixItems":[{"minimum":2}]}]}`,
		[]string{`[]`, `[2]`}, []string{`[1]`, `[2,3]`}},
}

func TestAllOfItems(t *testing.T) {
	t.Run("ajv", func(t *testing.T) { checkWithAjv(t, allOfItemsCases) })
	checkSchemaCases(t, allOfItemsCases)
	checkSchemaCases(t, allOfItemsDraft4)
}
