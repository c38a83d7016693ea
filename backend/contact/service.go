package contact

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/page"
)

// MaxLimit bounds a listing's page; it is also the default.
const MaxLimit = 50

// maxConversations bounds the conversation ids a contact's detail lists.
const maxConversations = 100

// Service is ContactService, for the principal in the request's context (an
// API key, or a console member): it reads the principal's organization's
// contacts. Requests were validated by the schema.
type Service struct {
	Store *db.Store
}

var _ parleyv1connect.ContactServiceHandler = (*Service)(nil)

// ListContacts lists the organization's contacts, newest first. A cursor
// that is not one of this listing's is Invalid.
func (s *Service) ListContacts(ctx context.Context, req *parleyv1.ListContactsRequest) (*parleyv1.ListContactsResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	limit := page.Size(req.GetLimit(), MaxLimit, MaxLimit)
	params := dbq.ListContactsParams{OrgID: p.OrgID, MaxRows: limit + 1}
	if e := strings.ToLower(strings.TrimSpace(req.GetEmail())); e != "" {
		params.Email = &e
	}
	if t := strings.TrimSpace(req.GetQ()); t != "" {
		pattern := "%" + likeEscaper.Replace(t) + "%"
		params.Pattern = &pattern
	}
	if params.BeforeTime, params.BeforeID, err = page.After(req.GetCursor()); err != nil {
		return nil, err
	}
	out := &parleyv1.ListContactsResponse{Contacts: []*parleyv1.ContactRecord{}}
	// SECURITY: the principal's organization, by tenant transaction and an
	// explicit org_id filter.
	err = s.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		rows, err := q.ListContacts(ctx, params)
		if err != nil {
			return err
		}
		rows, out.NextCursor = page.Cut(rows, limit, func(r dbq.Contact) (time.Time, string) { return r.CreatedAt, r.ID.String() })
		for _, r := range rows {
			c, err := Record(r)
			if err != nil {
				return err
			}
			out.Contacts = append(out.Contacts, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetContact returns one of the organization's contacts and its
// conversations' ids. Another organization's contact is Forbidden, as for
// every resource of the API (db.Missing); an unknown id is NotFound.
func (s *Service) GetContact(ctx context.Context, req *parleyv1.GetContactRequest) (*parleyv1.GetContactResponse, error) {
	p, id, err := caller(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	out := &parleyv1.GetContactResponse{ConversationIds: []string{}}
	// SECURITY: the contact and its conversations are read by the
	// principal's organization (tenant transaction and explicit org_id).
	err = s.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		c, err := q.GetContact(ctx, dbq.GetContactParams{OrgID: p.OrgID, ID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			return db.Missing(ctx, q, "contact", "contact", id)
		}
		if err != nil {
			return err
		}
		if out.Contact, err = Record(c); err != nil {
			return err
		}
		ids, err := q.ContactConversations(ctx, dbq.ContactConversationsParams{OrgID: p.OrgID, ContactID: &id, MaxRows: maxConversations})
		out.ConversationIds = append(out.ConversationIds, ids...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteContact deletes one of the organization's contacts; its
// conversations stay, unlinked, and the lead_capture calls in them lose
// the details they recorded (ForgetContactLeadCaptures), and the webhook
// deliveries that carry it lose it (deleteDeliveries). Another organization's contact is
// Forbidden and an unknown id NotFound, as for GetContact. Unlinking takes
// the conversations in another order than an agent's deletion does, so the
// agents of the contact's conversations are taken first
// (LockContactAgents), as DeleteAgent takes its agent before its
// conversations: the two at once wait for each other, never deadlock.
func (s *Service) DeleteContact(ctx context.Context, req *parleyv1.DeleteContactRequest) (*parleyv1.DeleteContactResponse, error) {
	p, id, err := caller(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	// SECURITY: the principal's organization (tenant transaction and
	// explicit org_id).
	err = s.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		if err := q.LockContactAgents(ctx, dbq.LockContactAgentsParams{OrgID: p.OrgID, ContactID: id}); err != nil {
			return err
		}
		// Its conversations before their answers, as a conversation's
		// deletion takes them.
		if err := q.LockContactConversations(ctx, dbq.LockContactConversationsParams{OrgID: p.OrgID, ContactID: id}); err != nil {
			return err
		}
		// Its email and phone number, which its delivered lead_capture
		// calls name (deleteDeliveries).
		c, err := q.GetContact(ctx, dbq.GetContactParams{OrgID: p.OrgID, ID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			return db.Missing(ctx, q, "contact", "contact", id)
		}
		if err != nil {
			return err
		}
		// While its conversations still name it: the lead_capture calls
		// that recorded it keep no copy of what it held.
		answers, err := q.ForgetContactLeadCaptures(ctx, dbq.ForgetContactLeadCapturesParams{
			OrgID: p.OrgID, ContactID: id, Result: ForgottenLeadResult,
		})
		if err != nil {
			return err
		}
		n, err := q.DeleteContact(ctx, dbq.DeleteContactParams{OrgID: p.OrgID, ID: id})
		if err == nil && n == 0 {
			return db.Missing(ctx, q, "contact", "contact", id)
		}
		if err != nil {
			return err
		}
		return deleteDeliveries(ctx, q, c, answers)
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.DeleteContactResponse{}, nil
}

// deleteDeliveries takes contact c out of the webhook deliveries that
// carry it, kept for retries and replays: its lead.created ones are
// deleted, as a form submission's form.submitted ones are with it (a
// pending one is never sent), the conversation events' lose it, as its
// conversations do, and the message.created ones of answers, whose
// lead_capture calls ForgetContactLeadCaptures changed, lose what the
// calls recorded, as the answers did; so do the delivered calls that name
// its email (or phone number), whose answer may be stored no longer (its
// conversation deleted). The endpoints are locked first, as an endpoint's
// deletion takes them before its cascade to their deliveries; the
// deliveries then, in a statement of their own, so that the copies that
// replays of them commit meanwhile are changed too.
func deleteDeliveries(ctx context.Context, q *dbq.Queries, c dbq.Contact, answers []uuid.UUID) error {
	org := c.OrgID
	if err := q.LockWebhooksForForget(ctx, org); err != nil {
		return err
	}
	params := dbq.LockContactDeliveriesParams{OrgID: org, ContactID: c.ID.String()}
	if err := q.LockContactDeliveries(ctx, params); err != nil {
		return err
	}
	if _, err := q.DeleteContactDeliveries(ctx, dbq.DeleteContactDeliveriesParams(params)); err != nil {
		return err
	}
	if _, err := q.UnlinkContactDeliveries(ctx, dbq.UnlinkContactDeliveriesParams(params)); err != nil {
		return err
	}
	if len(answers) == 0 && c.Email == nil && c.PhoneNumber == nil {
		return nil
	}
	ids := make([]string, len(answers))
	for i, a := range answers {
		ids[i] = a.String()
	}
	if err := q.LockLeadCaptureDeliveries(ctx, dbq.LockLeadCaptureDeliveriesParams{
		OrgID: org, MessageIds: ids, Result: ForgottenLeadResult, Email: c.Email, PhoneNumber: c.PhoneNumber,
	}); err != nil {
		return err
	}
	if _, err := q.ForgetDeliveredLeadCaptures(ctx, dbq.ForgetDeliveredLeadCapturesParams{OrgID: org, MessageIds: ids, Result: ForgottenLeadResult}); err != nil {
		return err
	}
	_, err := q.ForgetNamedLeadCaptureDeliveries(ctx, dbq.ForgetNamedLeadCaptureDeliveriesParams{
		OrgID: org, Result: ForgottenLeadResult, Email: c.Email, PhoneNumber: c.PhoneNumber,
	})
	return err
}

// ForgottenLeadResult is the result a lead_capture call of a deleted
// contact's conversations shows instead of the details it recorded; its
// arguments become {}.
const ForgottenLeadResult = "contact details removed: the contact was deleted"

// caller is the request's principal and the contact id it names; an id
// that is not a UUID is NotFound (no contact has it).
func caller(ctx context.Context, raw string) (*auth.Principal, uuid.UUID, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, uuid.Nil, err
	}
	id, err := uuid.Parse(raw)
	if err != nil {
		return nil, uuid.Nil, apperr.New(apperr.NotFound, "contact %q not found", raw)
	}
	return p, id, nil
}

// Record is a stored contact as the API shows it.
func Record(c dbq.Contact) (*parleyv1.ContactRecord, error) {
	custom := &structpb.Struct{}
	if len(c.CustomFields) > 0 {
		if err := custom.UnmarshalJSON(c.CustomFields); err != nil {
			return nil, err
		}
	}
	return &parleyv1.ContactRecord{
		Id: c.ID.String(), Email: deref(c.Email), PhoneNumber: deref(c.PhoneNumber), FirstName: c.FirstName,
		LastName: c.LastName, CustomFields: custom, Notes: c.Notes,
		CreateTime: timestamppb.New(c.CreatedAt), UpdateTime: timestamppb.New(c.UpdatedAt),
	}, nil
}

// likeEscaper makes text match itself in an ILIKE pattern.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
