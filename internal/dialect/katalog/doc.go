// Package katalog compiles Orkestra Katalogs (orkestra.orkspace.io/v1 Katalog) into
// morph's engine: each CRD entry of spec.crds gives a Mutator for its mutation rules
// (spec 000), a Validator for its validation rules and, with the other entries of the
// same group and kind, a Converter for its conversion paths (spec 003).
//
// # Loading
//
// spec.crds is either a map keyed by entry name or a list of entries with a name; both
// are accepted. An entry holds apiTypes (group, version, kind, plural), webhooks
// (mutation, validation, operations), operatorBox (also accepted under its other name,
// reconciler), validation and conversion. The two documents describe
// operatorBox.mutation in two shapes, and both are accepted: a list of rules, or
// {rules, mutateFirst}; mutateFirst may also stand beside mutation in operatorBox.
// Validation rules may stand in operatorBox.validation or in the entry's validation.
// Unknown fields are load errors that name the file, the document, the Katalog and the
// field. Entries are independent policies: a rejected entry does not reject its
// siblings. The annotation morph.dev/order on the Katalog sets the engine order of all
// its entries.
//
// webhooks.mutation defaults to true when the entry declares rules and only says
// whether the entry belongs in the MutatingWebhookConfiguration: the mutator is
// compiled either way, since reconcile-time mutation does not depend on it (offline,
// morph apply applies it). webhooks.operations (default CREATE and UPDATE) are the
// mutator's target operations. Entries lists the compiled entries of a bundle for the
// surfaces (webhook configuration, ordering, statistics).
//
// # Mutation rules
//
// A rule sets a field given in dot notation (keys with dots or slashes in double
// quotes: metadata.labels."app.kubernetes.io/name"). default applies when the field is
// absent, null, "", {} or []; a field holding 0 or false has a value and keeps it.
// override always applies, and wins when both are given; a rule with neither does
// nothing and is reported as a load warning. Rules apply in declaration order, each
// seeing the result of the ones before. A mutator never blocks admission: it runs once
// (ReinvokeNever), and on error (FailIgnore) the engine drops all its changes and
// warns with the spec's error text (see AdmissionErrorLog for the log line).
//
// Values are Go text/template expressions on the object, parsed at load. A string
// without "{{" is returned as is, with no template work. Missing fields resolve to ""
// (never "<no value>"): field references are compiled into calls of the library
// function field, and every printing action prints nil as "" and maps and lists as
// JSON. A value that is exactly one field reference ({{ .spec.x }}) yields that field
// with its type; a value that is exactly one action whose result is a map or a list
// ({{ cronToMap .spec.schedule }}) yields that map or list; every other value is a
// string, which is converted to integer, number or boolean when the CRD schema of the
// field is known (Options.Objects); without a schema it stays a string ("2"). YAML
// values that are not strings (default: 2) are constants of their own type. The
// function library (Funcs) is hermetic: no environment, files, network, clock or
// randomness. Every evaluation runs under a Budget (Options.Budget: steps and bytes,
// with defaults) and the request's context: a range over a huge number, a string
// doubled in a loop or a recursive template fails with a BudgetError naming the budget.
//
// # Conversion
//
// See Converter for the semantics of conversion paths (the webhook server answers
// ConversionReview v1 requests with it at /convert) and ConversionStats for the
// statistics. cronToMap turns
// five-field expressions and the macros @hourly, @daily (@midnight), @weekly, @monthly,
// @yearly and @annually into {minute, hour, dayOfMonth, month, dayOfWeek}; cronFromMap
// joins the fields with single spaces, so a v1 -> v2 -> v1 round trip gives back every
// single-spaced five-field expression exactly, while macros and extra white space come
// back in their normalised five-field form.
package katalog
