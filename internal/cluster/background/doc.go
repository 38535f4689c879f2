// Package background is morph's background controller in a cluster: it mutates objects
// that already exist, as Kyverno's background controller does for MutatingPolicies with
// evaluation.mutateExisting, and reconciles the custom resources of Katalog entries with
// mutation rules, as Katalog's reconciler does (spec 000).
//
// Every replica serves admission; only the leader writes. The work travels so:
//
//   - An admitted request that triggers a policy (Controller.Admitted, on every replica,
//     after admission and never on a dry run) becomes a BackgroundRequest object in
//     morph's namespace, one per triggered policy, holding the policy's ID and the
//     admitted request. The leader watches them, evaluates each target the trigger names
//     (request.Triggered), writes what changed, and deletes the BackgroundRequest when
//     every target is done. A leader that dies leaves the BackgroundRequest behind: the
//     next leader processes it.
//   - A new or changed policy that mutates existing objects is scanned (request.Scan) by
//     the leader; a new leader scans every such policy, so that an interrupted scan is
//     finished by the next one.
//   - The objects of every policy with Descriptor.Reconciled are watched by the leader
//     and evaluated in reconcile mode (request.Evaluate with request.Reconcile: validation
//     first unless mutateFirst), with the spec's Event on the object when a change is
//     written.
//
// Writes lose nothing: each is an update carrying the resourceVersion that was read, so
// the API server refuses it when the object changed in between; the controller then
// reads the object again and evaluates it again (never overwrites blindly), a bounded
// number of times, then retries later through a rate-limited workqueue. A write that
// still fails is a Warning Event on the policy and a metric, never a crash. All work
// stops the moment the lease is lost (the leader's context ends).
//
// The package knows no dialect: it runs the policies through internal/request.
package background
