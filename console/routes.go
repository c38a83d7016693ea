package console

import (
	"net/http"

	"github.com/parleyhq/parley/backend/member"
)

// routes registers every console page. Paths are part of the contract
// (docs/console.md); GET never changes state.
func (c *Console) routes() {
	m := c.mux
	m.HandleFunc("GET /console/static/{file}", serveStatic)
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
	})
	m.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
	})
	m.HandleFunc("GET /console/signin", c.signinForm)
	m.HandleFunc("POST /console/signin", c.signinSubmit)
	m.HandleFunc("GET /console/link", c.linkForm)
	m.HandleFunc("POST /console/link", c.linkSubmit)
	m.HandleFunc("POST /console/signout", c.signout)

	m.HandleFunc("GET /console/{$}", c.signedIn(member.Viewer, c.overview))
	m.HandleFunc("GET /console/plans", c.signedIn(member.Viewer, c.plans))
	// SECURITY: viewers never see or create keys.
	m.HandleFunc("GET /console/keys", c.signedIn(member.Admin, c.keys))
	m.HandleFunc("POST /console/keys", c.signedIn(member.Admin, c.createKey))
	m.HandleFunc("POST /console/keys/{id}/revoke", c.signedIn(member.Admin, c.revokeKey))

	// Webhooks: admins only, as keys (an endpoint receives the
	// organization's conversations and contacts).
	m.HandleFunc("GET /console/webhooks", c.signedIn(member.Admin, c.webhooks))
	m.HandleFunc("POST /console/webhooks", c.signedIn(member.Admin, c.createWebhook))
	m.HandleFunc("GET /console/webhooks/{id}", c.signedIn(member.Admin, c.webhookShow))
	m.HandleFunc("POST /console/webhooks/{id}/enabled", c.signedIn(member.Admin, c.webhookAction(setWebhookEnabled)))
	m.HandleFunc("POST /console/webhooks/{id}/test", c.signedIn(member.Admin, c.webhookAction(testWebhook)))
	m.HandleFunc("POST /console/webhooks/{id}/delete", c.signedIn(member.Admin, c.webhookAction(deleteWebhook)))
	m.HandleFunc("POST /console/webhooks/{id}/rotate-secret", c.signedIn(member.Admin, c.rotateWebhookSecret))
	m.HandleFunc("POST /console/webhooks/{id}/deliveries/{delivery}/replay", c.signedIn(member.Admin, c.webhookAction(replayDelivery)))

	// Agents: viewers read; admins create, edit, delete and use the playground.
	m.HandleFunc("GET /console/agents", c.signedIn(member.Viewer, c.agents))
	m.HandleFunc("POST /console/agents", c.signedIn(member.Admin, c.createAgent))
	m.HandleFunc("GET /console/agents/{id}", c.signedIn(member.Viewer, c.agent))
	m.HandleFunc("POST /console/agents/{id}", c.signedIn(member.Admin, c.updateAgent))
	m.HandleFunc("POST /console/agents/{id}/delete", c.signedIn(member.Admin, c.deleteAgent))
	m.HandleFunc("POST /console/agents/{id}/chat", c.signedIn(member.Admin, c.chatAgent))

	// Knowledge and conversations: viewers read and search; admins create
	// datastores and add, resync and delete datasources.
	m.HandleFunc("GET /console/datastores", c.signedIn(member.Viewer, c.dsList))
	m.HandleFunc("POST /console/datastores", c.signedIn(member.Admin, c.dsCreate))
	m.HandleFunc("GET /console/datastores/{id}", c.signedIn(member.Viewer, c.dsShow))
	m.HandleFunc("GET /console/datastores/{id}/sources", c.signedIn(member.Viewer, c.dsSources))
	m.HandleFunc("GET /console/datastores/{id}/search", c.signedIn(member.Viewer, c.dsSearch))
	m.HandleFunc(uploadRoute, c.signedIn(member.Admin, c.dsAdd))
	m.HandleFunc("POST /console/datasources/{id}/resync", c.signedIn(member.Admin, c.dsResync))
	m.HandleFunc("POST /console/datasources/{id}/delete", c.signedIn(member.Admin, c.dsDelete))
	m.HandleFunc("GET /console/conversations", c.signedIn(member.Viewer, c.convList))
	m.HandleFunc("GET /console/conversations/{id}", c.signedIn(member.Viewer, c.convShow))
	m.HandleFunc("GET /console/conversations/{id}/messages", c.signedIn(member.Viewer, c.convMessages))

	// Handoff: everyone reads the inbox; admins reply as themselves, resolve,
	// hand back and take over.
	m.HandleFunc("GET /console/inbox", c.signedIn(member.Viewer, c.inbox))
	m.HandleFunc("GET /console/inbox/list", c.signedIn(member.Viewer, c.inboxList))
	// SECURITY: admins only (conversation.Service checks the admin scope again).
	m.HandleFunc("POST /console/conversations/{id}/reply", c.signedIn(member.Admin, c.convReply))
	m.HandleFunc("POST /console/conversations/{id}/status", c.signedIn(member.Admin, c.convSetStatus))
	m.HandleFunc("POST /console/conversations/{id}/delete", c.signedIn(member.Admin, c.convDelete))

	// Forms: viewers read forms, submissions and the CSV export; admins
	// create, build, publish and delete.
	m.HandleFunc("GET /console/forms", c.signedIn(member.Viewer, c.formsList))
	m.HandleFunc("POST /console/forms", c.signedIn(member.Admin, c.formsCreate))
	m.HandleFunc("GET /console/forms/{id}", c.signedIn(member.Viewer, c.formsShow))
	m.HandleFunc("POST /console/forms/{id}", c.signedIn(member.Admin, c.formsSave))
	m.HandleFunc("POST /console/forms/{id}/delete", c.signedIn(member.Admin, c.formsDelete))
	m.HandleFunc("GET /console/forms/{id}/submissions", c.signedIn(member.Viewer, c.formsSubmissions))
	m.HandleFunc("GET /console/forms/{id}/submissions.csv", c.signedIn(member.Viewer, c.formsCSV))
	m.HandleFunc("POST /console/forms/{id}/submissions/{sid}/delete", c.signedIn(member.Admin, c.formsDeleteSubmission))

	// Contacts: everyone reads; admins delete.
	m.HandleFunc("GET /console/contacts", c.signedIn(member.Viewer, c.contactList))
	m.HandleFunc("GET /console/contacts/{id}", c.signedIn(member.Viewer, c.contactShow))
	m.HandleFunc("POST /console/contacts/{id}/delete", c.signedIn(member.Admin, c.contactDelete))

	// Members: everyone reads the list and sets their own password; owners
	// invite, change roles and remove. Operators: platform operators only;
	// to anyone else /console/admin does not exist (404).
	m.HandleFunc("GET /console/members", c.signedIn(member.Viewer, c.members))
	m.HandleFunc("POST /console/members/password", c.signedIn(member.Viewer, c.changePassword))
	// SECURITY: only owners manage members (member.Service checks again).
	m.HandleFunc("POST /console/members/invite", c.signedIn(member.Owner, c.inviteMember))
	m.HandleFunc("POST /console/members/invites/withdraw", c.signedIn(member.Owner, c.withdrawInvite))
	m.HandleFunc("POST /console/members/{id}/role", c.signedIn(member.Owner, c.setMemberRole))
	m.HandleFunc("POST /console/members/{id}/remove", c.signedIn(member.Owner, c.removeMember))
	m.HandleFunc("GET /console/admin", c.signedIn(member.Viewer, c.operatorOnly(c.admin)))
	m.HandleFunc("POST /console/admin/orgs/{id}/plan", c.signedIn(member.Viewer, c.operatorOnly(c.adminOrgPlan)))
	m.HandleFunc("POST /console/admin/plans/{plan}", c.signedIn(member.Viewer, c.operatorOnly(c.adminPlanLimits)))
	m.HandleFunc("POST /console/admin/plans/{plan}/knowledge", c.signedIn(member.Viewer, c.operatorOnly(c.adminPlanKnowledge)))

	// Anything else under /console/ is a page that does not exist.
	m.HandleFunc("/console/", c.signedIn(member.Viewer, func(w http.ResponseWriter, r *http.Request) {
		c.errorPage(w, r, errNoPage)
	}))
}
