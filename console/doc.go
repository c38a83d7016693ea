// Package console will hold the templ-rendered console in which
// organizations manage their API keys, plans and agents.
//
// Not built yet: the console is its own issue. Until then, keys are issued
// with `parley admin bootstrap` and ApiKeyService, and agents are managed over
// Connect or the REST paths.
package console
