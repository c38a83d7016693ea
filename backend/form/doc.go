// Package form is FormService: an organization's forms (named, typed
// fields, published or not) and the submissions visitors send with them.
// Schema (this package's field checks) turns a form's fields into the
// checks every submitted value passes: its type (E.164 phone numbers,
// email syntax, http(s) URLs, YYYY-MM-DD dates, numbers, options), whether
// it is required, its length or range and its pattern. Managing forms needs
// an API key (or a console member) of the form's organization; a published
// form is read and sent without one, counted against the owner's plan per
// client IP and per visitor as public agents are (auth.Gate.AdmitVisitor).
//
// It must never store a value its field did not accept, show an
// unpublished form to a caller without its organization's key, or read or
// write another organization's forms or submissions: every query names the
// organization it runs for, inside that organization's tenant transaction.
package form
