package katalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/morph-dev/morph/internal/engine"
)

// Names of the functions the compiler inserts into parsed templates. They are ordinary
// members of the function library, so a user may call them too.
const (
	fnField = "field"        // field OBJ KEY...: a field of OBJ, "" when absent or null
	fnText  = "katalogText"  // the printed form of an action's value
	fnTyped = "katalogTyped" // the JSON form of a single action's value
	fnRange = "katalogRange" // katalogRange VARS V: what a range iterates, one step per iteration
	fnStep  = "katalogStep"  // katalogStep V: V, one step (ends every template call's pipeline)
)

// valueKind says how a compiled Value is evaluated.
type valueKind int

const (
	// constantValue is a plain string (no "{{") or a non-string YAML value: the fast
	// path, returned as is with no template work.
	constantValue valueKind = iota
	// fieldValue is exactly one field reference, {{ .spec.x }}: the field's value with
	// its type.
	fieldValue
	// typedValue is exactly one action: a map or list result keeps its type (so that
	// {{ cronToMap .spec.schedule }} yields a map); anything else is its printed form.
	typedValue
	// textValue is any other template: its output, a string.
	textValue
)

// Value is a compiled default, override or conversion expression. It is immutable and
// safe for concurrent use.
type Value struct {
	raw      string
	kind     valueKind
	constant any
	field    Path
	tmpl     *templatePool
}

// IsPlain reports whether a string is returned as is, with no template parsing: it holds
// no action delimiter "{{".
func IsPlain(s string) bool { return !strings.Contains(s, "{{") }

// compileValue compiles a YAML value: strings as templates (plain strings on the fast
// path), any other value as a constant of its own type.
func compileValue(name string, v any, funcs template.FuncMap) (*Value, error) {
	if funcs == nil {
		funcs = Funcs()
	}
	s, ok := v.(string)
	if !ok {
		return &Value{raw: fmt.Sprint(v), kind: constantValue, constant: v}, nil
	}
	if IsPlain(s) {
		return &Value{raw: s, kind: constantValue, constant: s}, nil
	}
	t, err := template.New(name).Option("missingkey=zero").Funcs(funcs).Parse(s)
	if err != nil {
		return nil, err
	}
	val := &Value{raw: s, tmpl: &templatePool{base: t, lib: funcs}}
	action := singleAction(t.Tree)
	if p, ok := plainReference(action); ok {
		val.kind, val.field = fieldValue, p
		return val, nil
	}
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			rewriteList(tt.Root)
		}
	}
	val.kind = textValue
	if action != nil {
		// The rewrite ended the action in katalogText; a single action ends in
		// katalogTyped instead, whose JSON output Eval decodes.
		val.kind = typedValue
		action.Pipe.Cmds[len(action.Pipe.Cmds)-1] = call(fnTyped, action.Pipe.Position())
	}
	return val, nil
}

// String returns the expression as written.
func (v *Value) String() string { return v.raw }

// Eval evaluates the value against obj, which it never modifies. A typed result may
// share containers with obj. The evaluation is bounded by budget (zero fields take the
// defaults) and stops when ctx ends.
func (v *Value) Eval(ctx context.Context, obj map[string]any, budget Budget) (any, error) {
	switch v.kind {
	case constantValue:
		return v.constant, nil
	case fieldValue:
		return fieldOf(obj, v.field...), nil
	}
	out, err := v.tmpl.execute(ctx, obj, budget)
	if err != nil {
		if cause := budgetCause(err); cause != nil {
			return nil, cause
		}
		// Drop text/template's location, which shows the compiled (rewritten) action
		// rather than what the user wrote; the caller names the expression.
		return nil, withoutLocation(err)
	}
	if v.kind == textValue {
		return string(out), nil
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var res any
	if err := dec.Decode(&res); err != nil {
		return nil, fmt.Errorf("reading the template's result: %w", err)
	}
	switch r := engine.Normalize(res).(type) {
	case map[string]any, []any:
		return r, nil
	case nil:
		return "", nil
	default:
		return printed(r), nil
	}
}

// singleAction returns the template's only action when the template is exactly one
// action with no surrounding text and no variable declaration, else nil.
func singleAction(tree *parse.Tree) *parse.ActionNode {
	if tree == nil || tree.Root == nil {
		return nil
	}
	var action *parse.ActionNode
	for _, n := range tree.Root.Nodes {
		switch x := n.(type) {
		case *parse.TextNode:
			if len(x.Text) > 0 {
				return nil
			}
		case *parse.ActionNode:
			if action != nil || len(x.Pipe.Decl) > 0 {
				return nil
			}
			action = x
		default:
			return nil
		}
	}
	return action
}

// plainReference recognises {{ .a.b }} and {{ $.a.b }}.
func plainReference(a *parse.ActionNode) (Path, bool) {
	if a == nil || len(a.Pipe.Cmds) != 1 || len(a.Pipe.Cmds[0].Args) != 1 {
		return nil, false
	}
	switch n := a.Pipe.Cmds[0].Args[0].(type) {
	case *parse.FieldNode:
		return Path(n.Ident), true
	case *parse.VariableNode:
		if len(n.Ident) > 1 && n.Ident[0] == "$" {
			return Path(n.Ident[1:]), true
		}
	}
	return nil, false
}

// call builds a command calling a library function; the pipeline's previous value is its
// last argument.
func call(name string, pos parse.Pos) *parse.CommandNode {
	return &parse.CommandNode{NodeType: parse.NodeCommand, Pos: pos, Args: []parse.Node{parse.NewIdentifier(name).SetPos(pos)}}
}

// rewriteList makes field access and printing follow Katalog's rules: every field
// reference (.a.b, $x.a.b, (pipeline).a) becomes a call of "field", which yields "" for
// absent and null fields instead of text/template's "<no value>", and every printing
// action ends in "katalogText", which prints nil as "" and maps and lists as JSON.
func rewriteList(l *parse.ListNode) {
	if l == nil {
		return
	}
	for _, n := range l.Nodes {
		switch x := n.(type) {
		case *parse.ActionNode:
			rewritePipe(x.Pipe)
			if len(x.Pipe.Decl) == 0 {
				x.Pipe.Cmds = append(x.Pipe.Cmds, call(fnText, x.Pipe.Position()))
			}
		case *parse.IfNode:
			rewriteBranch(&x.BranchNode)
		case *parse.RangeNode:
			rewriteBranch(&x.BranchNode)
			// Every range goes through katalogRange, which charges a step per
			// iteration; it needs to know how many variables the range declares.
			vars := len(x.Pipe.Decl)
			cmd := call(fnRange, x.Pipe.Position())
			cmd.Args = append(cmd.Args, &parse.NumberNode{NodeType: parse.NodeNumber, Pos: x.Pipe.Position(), IsInt: true, Int64: int64(vars), Text: strconv.Itoa(vars)})
			x.Pipe.Cmds = append(x.Pipe.Cmds, cmd)
		case *parse.WithNode:
			rewriteBranch(&x.BranchNode)
		case *parse.TemplateNode:
			// A template call costs a step, so that recursive templates are bounded.
			if x.Pipe == nil {
				cmd := call(fnStep, x.Position())
				cmd.Args = append(cmd.Args, &parse.NilNode{NodeType: parse.NodeNil, Pos: x.Position()})
				x.Pipe = &parse.PipeNode{NodeType: parse.NodePipe, Pos: x.Position(), Cmds: []*parse.CommandNode{cmd}}
				continue
			}
			rewritePipe(x.Pipe)
			x.Pipe.Cmds = append(x.Pipe.Cmds, call(fnStep, x.Pipe.Position()))
		}
	}
}

func rewriteBranch(b *parse.BranchNode) {
	rewritePipe(b.Pipe)
	rewriteList(b.List)
	rewriteList(b.ElseList)
}

func rewritePipe(p *parse.PipeNode) {
	if p == nil {
		return
	}
	for _, c := range p.Cmds {
		for i, a := range c.Args {
			c.Args[i] = rewriteArg(a)
		}
	}
}

func rewriteArg(n parse.Node) parse.Node {
	switch x := n.(type) {
	case *parse.FieldNode:
		return fieldCall(&parse.DotNode{NodeType: parse.NodeDot, Pos: x.Pos}, x.Ident, x.Pos)
	case *parse.VariableNode:
		if len(x.Ident) > 1 {
			v := &parse.VariableNode{NodeType: parse.NodeVariable, Pos: x.Pos, Ident: x.Ident[:1]}
			return fieldCall(v, x.Ident[1:], x.Pos)
		}
	case *parse.ChainNode:
		return fieldCall(rewriteArg(x.Node), x.Field, x.Pos)
	case *parse.PipeNode:
		rewritePipe(x)
	}
	return n
}

// fieldCall builds (field BASE "k1" "k2" ...).
func fieldCall(base parse.Node, keys []string, pos parse.Pos) *parse.PipeNode {
	args := make([]parse.Node, 0, len(keys)+2)
	args = append(args, parse.NewIdentifier(fnField).SetPos(pos), base)
	for _, k := range keys {
		args = append(args, &parse.StringNode{NodeType: parse.NodeString, Pos: pos, Quoted: strconv.Quote(k), Text: k})
	}
	cmd := &parse.CommandNode{NodeType: parse.NodeCommand, Pos: pos, Args: args}
	return &parse.PipeNode{NodeType: parse.NodePipe, Pos: pos, Cmds: []*parse.CommandNode{cmd}}
}

// fieldOf walks maps along keys. An absent or null field, or a walk through a value
// that is not a map, yields "" (missingkey=zero with a string zero).
func fieldOf(base any, keys ...string) any {
	cur := base
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[k]
	}
	if cur == nil {
		return ""
	}
	return cur
}

// printed is the text form of a value: nil is "", maps and lists are compact JSON, and
// numbers print without exponent.
func printed(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case map[string]any, []any:
		b, err := json.Marshal(x)
		if err != nil {
			return fmt.Sprint(x)
		}
		return string(b)
	}
	return fmt.Sprint(v)
}

// typedJSON is the JSON form of a single action's result.
func typedJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("the result %s cannot be encoded: %w", describe(v), err)
	}
	return string(b), nil
}

// evalError is a template execution error without text/template's location prefix.
type evalError struct {
	msg string
	err error
}

func (e *evalError) Error() string { return e.msg }
func (e *evalError) Unwrap() error { return e.err }

// withoutLocation drops the `template: name:1:3: executing "name" at <...>: ` prefix
// of an execution error, which shows the compiled action rather than what the user
// wrote (the caller names the expression), keeping "error calling f: ...".
func withoutLocation(err error) error {
	var exec template.ExecError
	if !errors.As(err, &exec) || exec.Err == nil {
		return err
	}
	msg := exec.Err.Error()
	if i := strings.Index(msg, "error calling "); i >= 0 {
		return &evalError{msg: msg[i:], err: exec.Err}
	}
	if i := strings.Index(msg, ">: "); i >= 0 {
		return &evalError{msg: msg[i+3:], err: exec.Err}
	}
	return exec.Err
}
