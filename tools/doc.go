// Package tools defines what the executor calls: the Tool interface, effect
// classes, control errors that classify failures, a Registry that validates
// arguments against each tool's JSON Schema, and typed tools built from Go
// functions. Connectors live in subpackages (httptool, later mcptool); fakes for
// tests in tooltest.
//
// Imports: the standard library, plan (for the Validator interface it
// implements), invopop/jsonschema, santhosh-tekuri/jsonschema and gowebpki/jcs
// (canonical schemas for Registry.Hash), and tools/policy (a Spec carries its
// compiled policy rules). Never ledger:
// a tool never touches the ledger.
package tools
