// Package inspect shows what the model saw: a session's stored records
// beside the context the rules make of them, each record marked with its
// fate (kept, converted, pruned, trimmed, checkpoint, replaced, dropped,
// or rejected and quarantined when the service never applies it) and the
// rule of docs/CONTEXT.md that decided it.
//
// Load builds a View of a session as it is, or as it was at an earlier
// stream sequence, from the stored records: the records the service
// would apply go through projection.Explain, which is projection.Build,
// so a view at sequence N is exactly the context of the records up to
// N. WriteText prints a view for a terminal and View.MarshalJSON for
// scripts (ctxd inspect).
//
// New returns the web inspector, an http.Handler of server-rendered
// pages (html/template, auto-escaping) with a little JavaScript, all
// embedded with go:embed. Its pages, under its prefix, /ui/ by default:
//
//	/ui/                            sessions, recently active first; ?q= searches ids, ?page=N pages
//	/ui/sessions/ID                 one session: the conversation (the context as the model
//	                                sees it, calls beside their results, what the rules changed
//	                                or left out marked with the rule), then its latest records
//	                                beside the context
//	/ui/sessions/ID?page=N          the records before, a page of them at a time
//	/ui/sessions/ID?at=SEQ          the same, as it was at stream sequence SEQ
//	/ui/sessions/ID?at=A&diff=B     what changed in the context from the earlier sequence to
//	                                the later: entries added, removed, changed; fates changed
//	/ui/sessions/ID?edits=JSON      the latest page with the context edits of docs/EDITS.md applied
//	                                (tool_results needs trigger_tokens): what they changed marked "edited"
//	/ui/sessions/ID?after=SEQ       what a followed page lacks: the records after SEQ, fates, summary, the conversation
//	/ui/sessions/ID?format=json     the view as JSON, as ctxd inspect --json prints it
//	/ui/sessions/ID/events          server-sent events: the session's last record's seq
//	/ui/sessions/ID/records/SEQ     a stored record, raw
//	/ui/sessions/ID/images/SEQ/N    a thumbnail of the record's N-th image
//	/ui/rejected                    the records the projections skipped
//	/ui/rejected/SEQ                a rejected record, raw
//
// Mount it on the HTTP listener with the prefix it was given, and close
// it when the listener shuts down, since the event streams outlive a
// request otherwise:
//
//	// a is the running *app.App
//	ui := inspect.New(a.InspectSource(), inspect.Options{Config: a.InspectConfig()})
//	mux.Handle("/ui/", ui)
//	srv.RegisterOnShutdown(func() { ui.Close() })
//
// # Who sees what
//
// The handler shows only the sessions of the one stream its Source
// reads, the stream this ctxd serves, and only by valid session ids
// (subject tokens, checked before anything is read). A record is served
// only under the session its subject names, and a rejected record only
// when the rejected list holds it. Anyone who may fetch the pages may
// therefore see every session of that stream, as anyone who may request
// ctxd.context.* on the same NATS account can: mount the handler behind
// the listener's authentication, granted to those who may read every
// context. To narrow it, set Options.Authorize: it is asked for every
// session a request would show (list lines, pages, records, thumbnails,
// events, rejected records, with "" for those of no session), and a
// session it refuses is answered 404, as one that does not exist.
//
// # What a view costs
//
// A view costs what it shows, not what the session holds. It first lists
// the session's records by sequence and size from their headers
// (Source.Sizes), a few hundred bytes a record. A session whose records
// fit in Options.ReadBytes (8 MiB) is then read whole and explained: the
// fate of every record and the context. A larger one, several MiB a
// record with screenshots, is shown without fates (View.Cut says so,
// and names ctxd inspect and ctxd context for the rest): a page reads
// only those of its records that fit in ReadBytes, newest first, none
// larger than Options.ReadRecordBytes (1 MiB: a preview shows a few KiB
// of a record), and links to the others' raw records. The JSON of a view
// is bounded the same way. So the bytes a view reads are bounded whatever the session
// holds.
//
// The server loads each record whole from its store to send its headers,
// so listing a session of screenshots costs the server what the session
// holds. Hence the views read at most Options.ReadRate bytes a second
// together (DefaultReadRate, 32 MiB/s): records read and records listed,
// each counted once read, the next read waiting until they are paid for
// (the first ReadBytes at once). The first view of a session of 280 MB
// takes about 9 s; the service's replies to others keep their latency.
// A session's listing is held (16 sessions, MaxRecords rows at most): a
// later view lists only the records stored since (or, after a listing
// cut short, on from where it stopped), and a view as of an earlier
// sequence lists nothing. The event streams find a session's
// last record from the headers of its last message, then of those after
// it, and ask the service for no summary; the sessions list asks for a
// session's summary again only once the session moved.
//
// Options.MaxLoads views load at once, and one past them is answered 503
// at once; of those, one at a time reads records, so that views never
// take every core from the service together. The latest page of a
// session is read once for every view of it until the service applies
// another record (Source.Applied moves), and held without the records'
// values; a followed page fetches only what it lacks. A page holds
// PageRecords records and PageBytes of previews at most, a row 20
// thumbnails and the dropped list 200 entries: of the previews, the
// conversation shows its latest 100 entries within an eighth of
// PageBytes. A diff loads both its views in one slot of MaxLoads, each
// as a page's view is read (ReadBytes, the read rate), lists 200 entries
// and fates at most within PageBytes, and is refused (413) for a view
// that holds more than ReadBytes, having no context to compare.
// A number out of range in a query is a 400 that names it.
//
// Pages carry a Content-Security-Policy that runs no inline script or
// style, record contents are cut for display and escaped, and raw
// records are served as text or as a download, never as a page.
//
// # Files
//
//	view.go          Load and View: a session's records explained, what a page and ctxd inspect show
//	text.go          WriteText: a view for a terminal
//	handler.go       Source, Options, New and the Handler: routes, load slots, errors, templates
//	sessions.go      the sessions list and its summaries
//	session.go       a session's page: its rows and previews, a page of a view
//	latest.go        the latest page of a session, loaded once for every view of it
//	follow.go        a followed page's update: the records after it, the fates now
//	read.go          what a view reads: listing the records, the read bound, the read slot
//	diffpage.go      the diff page (?at=A&diff=B); diff.go compares the two views
//	edited.go        the page with context edits applied (?edits=JSON)
//	events.go        the server-sent events of a session's last record
//	raw.go           raw records and thumbnails
//	rejected.go      the rejected records, listed and raw
//	conversation.go  the conversation: the context as the model sees it
//	preview.go       previews of records for people
//	image.go         images in records and their thumbnails
//	pace.go          the read rate shared by every view
package inspect
