package console

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/webhook"
)

// Webhooks: the organization's endpoints, as the API's WebhookService
// manages them (admins only, as keys: an endpoint receives the
// organization's conversations and contacts). An owner sees here every
// endpoint, also those registered through the API by someone since gone,
// and can pause or delete it.

// webhooksView is what the webhooks page shows.
type webhooksView struct {
	Hooks   []*parleyv1.Webhook
	Events  []string
	Created *parleyv1.CreateWebhookResponse
	// Form keeps what was typed when the creation was refused.
	Form    webhookForm
	FormErr string
}

// webhookForm is the creation form's values.
type webhookForm struct {
	URL, Description string
	Events           []string
}

func (f webhookForm) has(event string) bool { return slices.Contains(f.Events, event) }

func (c *Console) webhooks(w http.ResponseWriter, r *http.Request) {
	c.webhooksWith(w, r, http.StatusOK, webhooksView{})
}

func (c *Console) webhooksWith(w http.ResponseWriter, r *http.Request, status int, d webhooksView) {
	list, err := c.Webhooks.ListWebhooks(r.Context(), &parleyv1.ListWebhooksRequest{Limit: webhook.MaxWebhooks})
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	d.Hooks, d.Events = list.GetWebhooks(), webhook.Events
	render(w, r, status, webhooksPage(viewOf(r.Context()), d))
}

func (c *Console) createWebhook(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.errorPage(w, r, apperr.New(apperr.Invalid, "unreadable form"))
		return
	}
	f := webhookForm{URL: strings.TrimSpace(r.PostForm.Get("url")), Description: strings.TrimSpace(r.PostForm.Get("description")), Events: r.PostForm["events"]}
	req := &parleyv1.CreateWebhookRequest{Url: f.URL, Description: f.Description, Events: f.Events}
	err := c.validate(req)
	var resp *parleyv1.CreateWebhookResponse
	if err == nil {
		resp, err = c.Webhooks.CreateWebhook(r.Context(), req)
	}
	if err != nil {
		pub := shown(err)
		if pub.Code == apperr.Internal {
			c.errorPage(w, r, err)
			return
		}
		msg := pub.Message
		if pub.Field != "" && !strings.HasPrefix(msg, pub.Field) {
			msg = pub.Field + ": " + msg
		}
		c.webhooksWith(w, r, apperr.Lookup(pub.Code).HTTPStatus, webhooksView{Form: f, FormErr: msg})
		return
	}
	// The secret is rendered in this response only.
	c.webhooksWith(w, r, http.StatusCreated, webhooksView{Created: resp})
}

// webhookView is what an endpoint's page shows.
type webhookView struct {
	Hook       *parleyv1.Webhook
	Deliveries []*parleyv1.WebhookDelivery
	// Secret is a new signing secret, shown once after a rotation.
	Secret string
}

func (c *Console) webhookShow(w http.ResponseWriter, r *http.Request) {
	c.webhookWith(w, r, http.StatusOK, "")
}

func (c *Console) webhookWith(w http.ResponseWriter, r *http.Request, status int, secret string) {
	id := r.PathValue("id")
	// SECURITY: another organization's endpoint is not found (errorPage).
	got, err := c.Webhooks.GetWebhook(r.Context(), &parleyv1.GetWebhookRequest{Id: id})
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	ds, err := c.Webhooks.ListWebhookDeliveries(r.Context(), &parleyv1.ListWebhookDeliveriesRequest{WebhookId: id, Limit: deliveriesShown})
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, status, webhookPage(viewOf(r.Context()), webhookView{Hook: got.GetWebhook(), Deliveries: ds.GetDeliveries(), Secret: secret}))
}

// deliveriesShown is how many of an endpoint's latest deliveries its page
// lists (the API pages through the rest).
const deliveriesShown = 25

// webhookAction runs one change of the endpoint named in the path and goes
// back to its page (or, deleted, to the list) with a flash.
func (c *Console) webhookAction(do func(c *Console, r *http.Request, id string) (flash string, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		msg, err := do(c, r, id)
		if err != nil {
			c.errorPage(w, r, err)
			return
		}
		c.flash(r.Context(), msg)
		to := "/console/webhooks/" + id
		if r.URL.Path == to+"/delete" {
			to = "/console/webhooks"
		}
		http.Redirect(w, r, to, http.StatusSeeOther)
	}
}

func setWebhookEnabled(c *Console, r *http.Request, id string) (string, error) {
	on, err := strconv.ParseBool(r.PostFormValue("enabled"))
	if err != nil {
		return "", apperr.InvalidField("enabled", "true or false")
	}
	_, err = c.Webhooks.UpdateWebhook(r.Context(), &parleyv1.UpdateWebhookRequest{
		Id: id, Enabled: &on, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"enabled"}},
	})
	if on {
		return "The endpoint receives events again.", err
	}
	return "The endpoint is paused: it receives nothing until resumed.", err
}

func deleteWebhook(c *Console, r *http.Request, id string) (string, error) {
	_, err := c.Webhooks.DeleteWebhook(r.Context(), &parleyv1.DeleteWebhookRequest{Id: id})
	return "The endpoint was deleted, with its deliveries.", err
}

func testWebhook(c *Console, r *http.Request, id string) (string, error) {
	_, err := c.Webhooks.TestWebhook(r.Context(), &parleyv1.TestWebhookRequest{Id: id})
	return "A webhook.test event is on its way; its delivery is listed below.", err
}

func replayDelivery(c *Console, r *http.Request, id string) (string, error) {
	_, err := c.Webhooks.ReplayWebhookDelivery(r.Context(), &parleyv1.ReplayWebhookDeliveryRequest{WebhookId: id, DeliveryId: r.PathValue("delivery")})
	return "The delivery's event is sent again, as a new delivery with the same webhook-id.", err
}

// rotateWebhookSecret shows the new secret on the endpoint's page, once.
func (c *Console) rotateWebhookSecret(w http.ResponseWriter, r *http.Request) {
	resp, err := c.Webhooks.RotateWebhookSecret(r.Context(), &parleyv1.RotateWebhookSecretRequest{Id: r.PathValue("id")})
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.webhookWith(w, r, http.StatusOK, resp.GetSecret())
}

// webhookState is an endpoint's state in a word: paused, failing or active.
func webhookState(h *parleyv1.Webhook) string {
	switch {
	case !h.GetEnabled():
		return "paused"
	case h.GetFailing():
		return "failing"
	}
	return "active"
}

// lastAnswer is what a delivery's last attempt got: the status code, or
// the error when none came.
func lastAnswer(d *parleyv1.WebhookDelivery) string {
	as := d.GetAttempts()
	if len(as) == 0 {
		return "not tried yet"
	}
	a := as[len(as)-1]
	if a.GetError() != "" {
		return a.GetError() // names the status when one came ("HTTP 500: ...")
	}
	return fmt.Sprintf("HTTP %d", a.GetStatusCode())
}
