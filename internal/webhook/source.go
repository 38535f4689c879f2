package webhook

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"slices"

	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

// Snapshot is one load of the policies: what compiled, and the context the policies read.
type Snapshot struct {
	Bundle *policy.Bundle
	// Namespaces finds Namespace objects for namespaceSelector (the context store).
	Namespaces NamespaceLookup
	// Notes are load-time remarks for the operator (the bundle's warnings, documents
	// that are not policies), each naming its file and document.
	Notes []string
}

// Source produces policy snapshots. Fingerprint is cheap compared with Load and changes
// whenever the inputs of Load change.
type Source interface {
	Fingerprint() (string, error)
	Load() (*Snapshot, error)
}

// FolderSource loads the policies of a folder, with context objects from other paths.
// Documents of the policy folder that no dialect handles join the context (a CRD, a
// Namespace or a params object kept next to the policies).
type FolderSource struct {
	Policies string
	Context  []string
	// NewLoader returns a loader whose dialects read the given store.
	NewLoader func(*objects.Store) *policy.Loader
	// Reader bounds what is read (its Warn is replaced: files that are not regular,
	// such as a FIFO, are skipped with a note rather than opened, which would block).
	Reader policy.Reader
}

// Fingerprint hashes the names, modes, sizes, modification times, inodes and status
// change times of every file under the policy folder and the context paths, and never
// their contents: it runs every couple of seconds, and reading every file each time
// cost as much as the policies are large. A write changes the change time even when
// the size and the modification time are put back.
func (s *FolderSource) Fingerprint() (string, error) {
	h := sha256.New()
	for _, root := range append([]string{s.Policies}, s.Context...) {
		if root == "-" {
			continue
		}
		if err := fingerprintPath(h, root); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fingerprintPath(h hash.Hash, root string) error {
	var files []string
	err := policy.WalkFiles(root, func(path string, _ fs.DirEntry) error {
		files = append(files, path)
		return nil
	})
	if err != nil {
		return fmt.Errorf("fingerprinting %s: %w", root, err)
	}
	slices.Sort(files)
	var num [8]byte
	for _, f := range files {
		info, err := os.Stat(f) // never opens the file: a FIFO does not block
		if err != nil {
			return fmt.Errorf("fingerprinting %s: %w", f, err)
		}
		h.Write([]byte(f)) // a hash.Hash never returns an error
		binary.LittleEndian.PutUint64(num[:], uint64(info.Mode()))
		h.Write(num[:])
		if !info.Mode().IsRegular() {
			continue
		}
		binary.LittleEndian.PutUint64(num[:], uint64(info.Size()))
		h.Write(num[:])
		binary.LittleEndian.PutUint64(num[:], uint64(info.ModTime().UnixNano()))
		h.Write(num[:])
		ino, ctime := fileIdentity(info)
		binary.LittleEndian.PutUint64(num[:], ino)
		h.Write(num[:])
		binary.LittleEndian.PutUint64(num[:], uint64(ctime))
		h.Write(num[:])
	}
	return nil
}

// Load reads the context and the policy folder and compiles the policies. Any error (a
// file that does not parse, a rejected policy) fails the whole load: the server keeps
// serving its last good snapshot rather than a partial one.
func (s *FolderSource) Load() (*Snapshot, error) {
	if s.NewLoader == nil {
		return nil, errors.New("policy source has no loader")
	}
	store := objects.NewStore()
	var skipped []string
	rd := s.Reader
	rd.Warn = func(msg string) { skipped = append(skipped, msg) }
	if len(s.Context) > 0 {
		docs, err := rd.Read(s.Context, nil)
		if err != nil {
			return nil, fmt.Errorf("reading context: %w", err)
		}
		for _, d := range docs {
			if err := store.Add(d.Object); err != nil {
				return nil, fmt.Errorf("%s: %w", d.Where(), err)
			}
		}
	}
	docs, err := rd.Read([]string{s.Policies}, nil)
	if err != nil {
		return nil, err
	}
	loader := s.NewLoader(store)
	snap := &Snapshot{Namespaces: store, Notes: skipped}
	for _, d := range docs {
		if d.APIVersion() == "" || d.Kind() == "" || loader.Known(d) {
			continue
		}
		if err := store.Add(d.Object); err != nil {
			snap.Notes = append(snap.Notes, fmt.Sprintf("%s: not a policy and not a usable context object (%v); ignored", d.Where(), err))
		}
	}
	bundle, _, err := loader.Load(docs)
	if err != nil {
		return nil, err
	}
	snap.Bundle = bundle
	snap.Notes = append(snap.Notes, bundle.Warnings...)
	return snap, nil
}
