package jsonvalue_test

import (
	"bytes"
	"encoding/json"
	"github.com/morph-dev/morph/internal/jsonvalue"
	"os"
	"testing"
)

// podJSON is the workload's Pod, the object of the load test's AdmissionReview.
const podJSON = "../../bench/testdata/gatekeeper-workload/pod.json"

func readPod(b *testing.B) []byte {
	b.Helper()
	data, err := os.ReadFile(podJSON)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

func BenchmarkDecodePod(b *testing.B) {
	data := readPod(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (jsonvalue.Options{Normalize: true}).DecodeObject(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodingJSONPod is what the webhook did before: encoding/json with
// UseNumber, then the json.Number conversion.
func BenchmarkEncodingJSONPod(b *testing.B) {
	data := readPod(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			b.Fatal(err)
		}
		if _, err := convertNumbers(v, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePodCompact decodes the Pod without whitespace, as the API server
// sends it.
func BenchmarkDecodePodCompact(b *testing.B) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, readPod(b)); err != nil {
		b.Fatal(err)
	}
	data := compact.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (jsonvalue.Options{Normalize: true}).DecodeObject(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodingJSONUnmarshalPod is plain json.Unmarshal into map[string]any, with
// float64 numbers: the floor of encoding/json.
func BenchmarkEncodingJSONUnmarshalPod(b *testing.B) {
	data := readPod(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			b.Fatal(err)
		}
	}
}
