package record_test

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"testing"

	"github.com/ctxd/ctxd/pkg/record"
)

// assistantRecord is a typical assistant message of about 500 bytes: some
// text and one tool call.
const assistantRecord = `{"role":"assistant","content":[` +
	`{"type":"text","text":"The login button has no onClick handler, so clicking it does nothing. I will wire it to handleSubmit and rerun the tests."},` +
	`{"type":"toolCall","id":"toolu_01A09q90qw90lq917835lq9","name":"edit","arguments":{"path":"src/login.tsx","oldText":"<button>Log in</button>","newText":"<button onClick={handleSubmit}>Log in</button>"}}],` +
	`"provider":"anthropic","model":"claude-sonnet-4-5",` +
	`"usage":{"input":10234,"output":187,"cacheRead":9120},` +
	`"stopReason":"toolUse","timestamp":1764493212000}`

// screenshotRecord returns a tool result holding a 200 KB base64 PNG.
func screenshotRecord() []byte {
	raw := make([]byte, 150*1024)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	data := base64.StdEncoding.EncodeToString(raw)
	var b bytes.Buffer
	b.WriteString(`{"role":"toolResult","toolCallId":"toolu_01B","toolName":"browser_use","content":[`)
	b.WriteString(`{"type":"text","text":"Clicked #login; nothing happened"},`)
	b.WriteString(`{"type":"image","data":"` + data + `","mimeType":"image/png"}],`)
	b.WriteString(`"isError":false,"timestamp":1764493208000}`)
	return b.Bytes()
}

type benchInput struct {
	name string
	json []byte
}

func benchInputs() []benchInput {
	return []benchInput{
		{"assistant", []byte(assistantRecord)},
		{"screenshot", screenshotRecord()},
	}
}

func mustMsgpack(b *testing.B, js []byte) []byte {
	b.Helper()
	v, err := record.DecodeJSON(js)
	if err != nil {
		b.Fatal(err)
	}
	mp, err := record.MarshalMsgpack(v)
	if err != nil {
		b.Fatal(err)
	}
	return mp
}

func reportRecords(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkDecode(b *testing.B) {
	for _, in := range benchInputs() {
		formats := []struct {
			name string
			data []byte
		}{
			{"json", in.json},
			{"msgpack", mustMsgpack(b, in.json)},
		}
		for _, f := range formats {
			b.Run(in.name+"/"+f.name, func(b *testing.B) {
				b.SetBytes(int64(len(f.data)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := record.Decode(f.data); err != nil {
						b.Fatal(err)
					}
				}
				reportRecords(b)
			})
		}
		// As the service's store decodes a record: sharing its strings
		// with the message, and telling whether it is canonical.
		b.Run(in.name+"/json-store", func(b *testing.B) {
			d := record.Decoder{ShareInput: true, ShareShort: true}
			b.SetBytes(int64(len(in.json)))
			b.ReportAllocs()
			for b.Loop() {
				if _, canonical, err := d.DecodeCanonical(in.json); err != nil || !canonical {
					b.Fatal(canonical, err)
				}
			}
			reportRecords(b)
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, in := range benchInputs() {
		v, err := record.Decode(in.json)
		if err != nil {
			b.Fatal(err)
		}
		formats := []struct {
			name   string
			encode func([]byte, any) ([]byte, error)
		}{
			{"json", record.AppendJSON},
			{"msgpack", record.AppendMsgpack},
		}
		for _, f := range formats {
			out, err := f.encode(nil, v)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(in.name+"/"+f.name, func(b *testing.B) {
				b.SetBytes(int64(len(out)))
				b.ReportAllocs()
				buf := make([]byte, 0, len(out))
				for b.Loop() {
					if buf, err = f.encode(buf[:0], v); err != nil {
						b.Fatal(err)
					}
				}
				reportRecords(b)
			})
		}
	}
}
