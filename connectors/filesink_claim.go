package connectors

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/weirstream/weir/internal/errkind"
)

// A transactional file sink writes only into a directory that it has
// claimed for its job and operator, and puts the job id and operator uid in
// every file name. Without the claim, two jobs (or two operators of one
// job) sharing a directory would delete each other's in-progress files and
// take each other's committed files for their own, and rows would be lost.

// ClaimFile is the file in a transactional file sink's directory that names
// the job and operator writing there. It is hidden, like in-progress files,
// so that readers of the committed files skip it. It stays when the job
// ends: another job may write to the directory once it is deleted, and a
// job submitted from a checkpoint of the claiming job takes the claim over
// for the same operator (OperatorContext.RestoreJobID).
const ClaimFile = ".weir-file-sink-claim"

// claimVersion is the format version of ClaimFile.
const claimVersion = 1

// ErrSinkDirClaimed marks the error of a transactional file sink whose
// directory another job, or another operator of the same job, has claimed.
var ErrSinkDirClaimed = errors.New("connectors: file sink directory claimed by another job or operator")

// sinkClaim is the content of ClaimFile, one JSON object.
type sinkClaim struct {
	Version     int    `json:"version"`
	JobID       string `json:"jobId"`
	OperatorUID string `json:"operatorUid"`
}

// claimDir claims dir for operator uid of job jobID, or accepts the claim
// that an earlier subtask or attempt of the same operator made. Subtasks may
// call it concurrently, in one process or several: the claim appears
// complete or not at all, because it is written to a temporary file that is
// then hard-linked to ClaimFile, which fails if ClaimFile exists.
//
// restoreJobID is the job whose checkpoint the operator restores
// (OperatorContext.RestoreJobID). When it is another job, a claim of that
// job for the same operator uid passes to jobID (takeClaim): the new job
// carries on where the restored one stopped.
func claimDir(dir, jobID, uid, restoreJobID string) error {
	path := filepath.Join(dir, ClaimFile)
	got, err := readClaim(path)
	if errors.Is(err, fs.ErrNotExist) {
		err = createClaim(dir, path, sinkClaim{Version: claimVersion, JobID: jobID, OperatorUID: uid})
		if err == nil {
			return nil
		}
		if errors.Is(err, fs.ErrExist) {
			got, err = readClaim(path) // another subtask claimed it first
		}
	}
	if err != nil {
		return err
	}
	if got.JobID == jobID && got.OperatorUID == uid {
		return nil
	}
	if restoreJobID != "" && restoreJobID != jobID && got.JobID == restoreJobID && got.OperatorUID == uid {
		if got, err = takeClaim(dir, path, sinkClaim{Version: claimVersion, JobID: jobID, OperatorUID: uid}); err != nil {
			return err
		}
		if got.JobID == jobID && got.OperatorUID == uid {
			return nil
		}
	}
	var restoring string
	if restoreJobID != "" && restoreJobID != jobID {
		restoring = fmt.Sprintf(" (it restores a checkpoint of job %q, which does not hold the claim)", restoreJobID)
	}
	return errkind.Mark(fmt.Errorf("file sink: directory %s is claimed by job %q, operator %q, so operator %q of job %q cannot write there%s: "+
		"two writers in one directory lose each other's rows; use another directory, or delete %s once job %q is gone",
		dir, got.JobID, got.OperatorUID, uid, jobID, restoring, path, got.JobID), ErrSinkDirClaimed)
}

// takeClaim replaces the claim file at path, which names the job whose
// checkpoint job c.JobID restores, with c, and returns the claim the file
// then holds.
//
// Every subtask of the new job may do so at once, in one process or
// several. Each writes c to a temporary file and renames it over path, so a
// reader sees the old claim or c, each complete, never a mixture; renames
// racing with one another all install the same claim. Reading the file
// again afterwards confirms it: what it returns is what the caller goes by.
// The takeover is exclusive in sequence only: once one job has taken the
// claim, another that restores the same checkpoint finds the new claim and
// is refused; two different jobs taking over at the same moment could both
// succeed, which only submitting two jobs from one checkpoint into one
// directory at once can bring about.
func takeClaim(dir, path string, c sinkClaim) (sinkClaim, error) {
	tmp, err := writeTempClaim(dir, c)
	if err != nil {
		return sinkClaim{}, err
	}
	defer os.Remove(tmp) // gone after the rename; left only by a failure
	if err := os.Rename(tmp, path); err != nil {
		return sinkClaim{}, fmt.Errorf("file sink: claim %s for job %q, taking over from the job it restores: %w", dir, c.JobID, err)
	}
	if err := syncDir(dir); err != nil {
		return sinkClaim{}, err
	}
	return readClaim(path)
}

// readClaim reads the claim file at path; the error wraps fs.ErrNotExist if
// there is none.
func readClaim(path string) (sinkClaim, error) {
	var c sinkClaim
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("file sink: read claim file: %w", err)
	}
	// The decoding error is left out: it could quote whatever the file holds.
	if json.Unmarshal(data, &c) != nil || c.Version != claimVersion {
		return c, fmt.Errorf("file sink: %s is not a claim file of format version %d; delete it if no job writes to %s any more",
			path, claimVersion, filepath.Dir(path))
	}
	return c, nil
}

// createClaim writes c to path unless path exists; then the error wraps
// fs.ErrExist.
func createClaim(dir, path string, c sinkClaim) error {
	tmp, err := writeTempClaim(dir, c)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // the claim, if made, is the link
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("file sink: claim %s: %w; the directory must be on a file system that supports hard links", dir, err)
	}
	return syncDir(dir)
}

// writeTempClaim writes c, durably, to a new temporary file in dir and
// returns its path, which the caller removes.
func writeTempClaim(dir string, c sinkClaim) (string, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("file sink: encode claim: %w", err)
	}
	f, err := os.CreateTemp(dir, ClaimFile+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("file sink: claim %s: %w", dir, err)
	}
	tmp := f.Name()
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("file sink: claim %s: write %s: %w", dir, tmp, err)
	}
	return tmp, nil
}

// maxNameToken is the longest job id or operator uid that goes into file
// names as it is. Longer ones are hashed, so that names stay well below the
// 255-byte limit of common file systems.
const maxNameToken = 64

// sinkIdentity returns the part of the file names that names the job and the
// operator: "<job>-<uid>", each made safe by nameToken. Job tokens never
// contain '-', so the first '-' ends the job, and operator tokens (which may)
// are followed by "-<subtask>-<number>" and end at the second-to-last '-':
// distinct identities therefore make distinct names.
func sinkIdentity(jobID, uid string) string {
	return nameToken(jobID, false) + "-" + nameToken(uid, true)
}

// nameToken returns s if it is at most maxNameToken bytes of ASCII letters,
// digits, '_', '.' and (if dash) '-'; otherwise "~" and 16 hex digits of its
// SHA-256. Plain tokens never contain '~', so no two strings share a token.
func nameToken(s string, dash bool) string {
	plain := len(s) <= maxNameToken
	for i := 0; plain && i < len(s); i++ {
		c := s[i]
		plain = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || dash && c == '-'
	}
	if plain {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "~" + hex.EncodeToString(sum[:8])
}
