package protocol

// Headers of a reply too large for one message (docs/OPERATING.md,
// "Replies larger than the max payload").
const (
	// HeaderChunks is the number of chunks the reply has; the first is
	// the message carrying the header.
	HeaderChunks = "Ctxd-Chunks"
	// HeaderChunkSubject is the subject prefix the other chunks are
	// requested on: PREFIX.<k> answers chunk k, for k = 1 .. chunks-1.
	// A pushed reply has none.
	HeaderChunkSubject = "Ctxd-Chunk-Subject"
	// HeaderReplyBytes is the size of the whole reply.
	HeaderReplyBytes = "Ctxd-Reply-Bytes"
	// HeaderAcceptChunks, on a request, set to AcceptChunksPush, asks for
	// every chunk to be sent to the request's reply subject, in order,
	// each with HeaderChunk: nothing is held for the client to fetch.
	HeaderAcceptChunks = "Ctxd-Accept-Chunks"
	// AcceptChunksPush is HeaderAcceptChunks's value that asks for push.
	AcceptChunksPush = "push"
	// HeaderChunk is the number of a pushed chunk, 0 .. chunks-1.
	HeaderChunk = "Ctxd-Chunk"
	// HeaderInstance names the instance that answered.
	HeaderInstance = "Ctxd-Instance"
	// HeaderAccept, set to AcceptMsgpack on a request with an empty
	// body, asks for a msgpack reply.
	HeaderAccept  = "Accept"
	AcceptMsgpack = "application/msgpack"
)

// Reply codes, sent in the Nats-Service-Error-Code header.
const (
	CodeBadRequest  = "400"
	CodeNotFound    = "404"
	CodeWaitExpired = "504"
	CodeInternal    = "500"
	// CodeBusy: the service refused the request at once, to protect the
	// others; the description says which bound was reached. Retry later,
	// with backoff.
	CodeBusy = "503"
)
