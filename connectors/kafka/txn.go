package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// txnSystem is the exactly-once sink's twophase.System: every transaction
// of the framework is one Kafka transaction, written by a transactional
// producer of its own.
//
// # Transactional ids
//
// The transaction with TxnID id has the transactional id
//
//	<prefix>.<subtask>.<checkpoint>
//
// where prefix is transactionalIdPrefix or, by default, weir.<job>.<uid>
// (twophase.Prefix without its final dot), subtask is id.Subtask and
// checkpoint is id.Checkpoint, the checkpoint the transaction is expected
// to end in. The attempt is deliberately not part of it: a restarted
// subtask that restored checkpoint c begins its first transaction with id
// <prefix>.<subtask>.<c+1>, the id the failed attempt used after the same
// checkpoint, and initialising a producer for it fences the failed
// attempt's producer (a zombie still running cannot write or commit any
// more) and aborts the transaction it left open. Within one attempt every
// transaction has another expected checkpoint, since a transaction stays
// open until the next barrier; so ids never repeat within an attempt.
//
// # Pre-commit and commit
//
// PreCommit flushes the producer: every record is then acknowledged by the
// brokers, in an open transaction. The handle holds the transactional id,
// producer id and epoch. Commit ends the transaction with an EndTxn(commit)
// request of its own carrying the handle's producer id and epoch, which
// Kafka accepts from any client: in the process that pre-committed it as
// after a restore in another one. The brokers answer (kfake, Kafka's
// behaviour as franz-go's fake cluster implements it, answers the same;
// the tests check it):
//
//   - the transaction is open with that producer id and epoch: it commits,
//     and NONE;
//   - it already committed: NONE, whether the brokers bump the epoch on
//     every commit (transaction.version 2, KIP-890, where EndTxn v5 with
//     the epoch before the bump is recognised as a retry) or not (EndTxn
//     v4 and older, the same epoch is a retry); so committing twice is
//     fine. EndTxn is sent with v5 and later only where the cluster has
//     transaction.version 2 finalised, as the Kafka client does;
//   - it was aborted (it outlived its timeout, or a newer producer of the
//     same transactional id fenced it): PRODUCER_FENCED,
//     INVALID_PRODUCER_EPOCH or INVALID_TXN_STATE. Its records are lost:
//     Commit fails with ErrTransactionLost, the job fails over, and the
//     error says to raise transactionTimeout;
//   - the transactional id expired (transactional.id.expiration.ms, 7
//     days by default, after its last use): INVALID_PRODUCER_ID_MAPPING,
//     reported as twophase.ErrNotFound.
//
// # Recovery
//
// Recover aborts the transactions that the subtasks in Recovery.Subtasks
// of earlier attempts (of this job and of Recovery.RestoreJobID) left
// open: it lists the transactions of the cluster that are still open
// (ListTransactions, Kafka 3.0+, which a principal sees for the
// transactional ids it may describe, as a producer of them may), keeps
// those whose id is <prefix>.<subtask>.<n> for one of the subtasks and is
// not the id of a transaction in Recovery.KeepNames (those were just
// committed), and aborts each by initialising a producer for its id, which
// bumps the epoch and aborts the open transaction. Any open transaction of
// these subtasks that the checkpoint does not keep can only be a leftover:
// a restored subtask never commits it.
//
// Probing the ids after the restored checkpoint (c+1, c+2, ... until one
// was never used) is not enough on its own: a transaction begins only
// when rows arrive, so the ids a subtask used after c have gaps wherever a
// checkpoint passed without rows, and a leftover after a gap would stay
// open until its timeout, holding back every read_committed consumer of
// the partitions it wrote. Against brokers without ListTransactions the
// sink nevertheless falls back to that probe (and logs that leftovers
// after a gap are left to time out).
type txnSystem struct {
	spec *sinkSpec
	octx *stream.OperatorContext
	log  *slog.Logger

	opts   []kgo.Opt   // the options of every client
	hook   *connHook   // shared by every client
	admin  *kgo.Client // a plain client: metadata, EndTxn, InitProducerID, ListTransactions
	prefix string
	enc    *encoder
	// tv2: the cluster finalised transaction.version 2 (epoch bump on
	// every EndTxn); listTxns: it supports ListTransactions.
	tv2, listTxns bool

	// live are the producers of this process's open and pre-committed
	// transactions, by transactional id.
	live map[string]*kgo.Client

	connectTimeout time.Duration
}

var _ twophase.System = (*txnSystem)(nil)

// handle is what a pre-committed transaction needs to be committed from
// anywhere: version=1 | string transactional id | varint producer id |
// varint epoch.
type handle struct {
	txnID string
	pid   int64
	epoch int16
}

const handleVersion = 1

func (h handle) encode() []byte {
	b := statecodec.AppendString([]byte{handleVersion}, h.txnID)
	b = statecodec.AppendVarint(b, h.pid)
	return statecodec.AppendVarint(b, int64(h.epoch))
}

func decodeHandle(b []byte) (handle, error) {
	r := statecodec.NewReader(b)
	if v := r.Byte(); r.Err() == nil && v != handleVersion {
		return handle{}, fmt.Errorf("kafka transaction handle of unknown version %d (this Weir reads version %d)", v, handleVersion)
	}
	h := handle{txnID: r.String(maxStateString), pid: r.Varint()}
	epoch := r.Varint()
	if err := r.Done(); err != nil {
		return handle{}, fmt.Errorf("corrupt kafka transaction handle: %w", err)
	}
	if h.txnID == "" || h.pid < 0 || epoch < 0 || epoch > 1<<15-1 {
		return handle{}, fmt.Errorf("corrupt kafka transaction handle: transactional id %q, producer id %d, epoch %d", h.txnID, h.pid, epoch)
	}
	h.epoch = int16(epoch)
	return h, nil
}

// Open connects, checks the topic and the input schema, and finds out what
// the cluster supports.
func (s *txnSystem) Open(ctx context.Context, octx *stream.OperatorContext) error {
	s.octx, s.log = octx, taskLogger(octx)
	s.live = make(map[string]*kgo.Client)
	var err error
	if s.enc, err = newEncoder(s.spec, octx); err != nil {
		return err
	}
	s.prefix = s.spec.cfg.TransactionalIDPrefix
	if s.prefix == "" {
		s.prefix = defaultPrefix(octx.JobID, octx.OperatorUID)
	}
	s.hook = new(connHook)
	if s.opts, err = commonOpts("kafka sink", s.spec.servers, s.spec.cfg.Security, octx.Paths, s.log, s.hook); err != nil {
		return err
	}
	if s.admin, err = kgo.NewClient(s.opts...); err != nil {
		return fmt.Errorf("kafka sink: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	if err := checkTopicExists(cctx, kadm.NewClient(s.admin), s.spec, s.hook); err != nil {
		return err
	}
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(cctx, s.admin)
	if err != nil {
		return unreachable("kafka sink", s.spec.servers, err, s.hook)
	}
	endTxnMax := int16(-1)
	for _, k := range resp.ApiKeys {
		switch kmsg.Key(k.ApiKey) {
		case kmsg.ListTransactions:
			s.listTxns = true
		case kmsg.EndTxn:
			endTxnMax = k.MaxVersion
		}
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" && f.MaxVersionLevel >= 2 {
			s.tv2 = endTxnMax >= 5
		}
	}
	if !s.tv2 {
		// EndTxn v5 is for clusters that bump the epoch on every
		// transaction; pin the admin client below it, as the Kafka
		// client does.
		v := kversion.Stable()
		v.SetMaxKeyVersion(int16(kmsg.EndTxn), min(4, max(endTxnMax, 0)))
		s.admin.Close()
		if s.admin, err = kgo.NewClient(append(slices.Clone(s.opts), kgo.MaxVersions(v))...); err != nil {
			return fmt.Errorf("kafka sink: %w", err)
		}
	}
	return nil
}

// defaultPrefix is the transactional id prefix of a sink of job jobID with
// operator uid uid.
func defaultPrefix(jobID, uid string) string {
	return strings.TrimSuffix(twophase.Prefix(jobID, uid), ".")
}

// transactionalID is the transactional id of transaction id of a sink with
// prefix prefix.
func transactionalID(prefix string, subtask int, checkpoint int64) string {
	return prefix + "." + strconv.Itoa(subtask) + "." + strconv.FormatInt(checkpoint, 10)
}

// parseTransactionalID returns the subtask and checkpoint of a
// transactional id with prefix, ok false for any other string.
func parseTransactionalID(txnID, prefix string) (subtask int, checkpoint int64, ok bool) {
	rest, found := strings.CutPrefix(txnID, prefix+".")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(rest, ".")
	if !found {
		return 0, 0, false
	}
	st, err1 := strconv.Atoi(a)
	ck, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || st < 0 || ck < 0 || strconv.Itoa(st) != a || strconv.FormatInt(ck, 10) != b {
		return 0, 0, false
	}
	return st, ck, true
}

// Begin starts a transaction with a producer of its own. The producer
// initialises its transactional id with its first record, fencing any
// earlier producer of the same id.
func (s *txnSystem) Begin(_ context.Context, id twophase.TxnID) (twophase.Txn, error) {
	txnID := transactionalID(s.prefix, id.Subtask, id.Checkpoint)
	opts := append(slices.Clone(s.opts), producerOpts(s.spec)...)
	opts = append(opts, kgo.TransactionalID(txnID), kgo.TransactionTimeout(s.spec.txTimeout))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	if err := cl.BeginTransaction(); err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka sink: transactional id %s: %w", txnID, err)
	}
	s.live[txnID] = cl
	return &txn{sys: s, cl: cl, txnID: txnID}, nil
}

// txn is one Kafka transaction.
type txn struct {
	sys   *txnSystem
	cl    *kgo.Client
	txnID string
	err   asyncErr
}

func (t *txn) Write(ctx context.Context, b *stream.Batch) error {
	if err := t.err.get(); err != nil {
		return err
	}
	recs, err := t.sys.enc.records(b)
	if err != nil {
		return err
	}
	for _, r := range recs {
		t.cl.Produce(ctx, r, t.err.promise)
	}
	return t.err.get()
}

func (t *txn) PreCommit(ctx context.Context) ([]byte, error) {
	if err := t.cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("kafka sink: transactional id %s: flush: %w", t.txnID, err)
	}
	if err := t.err.get(); err != nil {
		return nil, t.explain(err)
	}
	pid, epoch, err := t.cl.ProducerID(ctx)
	if err != nil {
		return nil, t.explain(err)
	}
	return handle{txnID: t.txnID, pid: pid, epoch: epoch}.encode(), nil
}

// explain adds advice to a transactional producer's error.
func (t *txn) explain(err error) error {
	switch {
	case errors.Is(err, kerr.InvalidTransactionTimeout):
		return fmt.Errorf("kafka sink: transactional id %s: %w; transactionTimeout %s is above the brokers' transaction.max.timeout.ms: lower it, or raise that broker setting",
			t.txnID, err, t.sys.spec.txTimeout)
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch):
		return fmt.Errorf("kafka sink: transactional id %s: %w; another producer took over this transactional id (a newer attempt of the job, or another job with the same transactionalIdPrefix)", t.txnID, err)
	}
	return fmt.Errorf("kafka sink: transactional id %s: %w", t.txnID, err)
}

func (t *txn) Abort(ctx context.Context) error {
	err := t.cl.AbortBufferedRecords(ctx)
	if err == nil {
		err = t.cl.EndTransaction(ctx, kgo.TryAbort)
	}
	delete(t.sys.live, t.txnID)
	t.cl.Close()
	if err != nil {
		return fmt.Errorf("kafka sink: abort transactional id %s: %w", t.txnID, err)
	}
	return nil
}

// Commit commits a pre-committed transaction with an EndTxn request
// carrying its handle, whether or not this process pre-committed it.
//
// It never ends the transaction through the producer's own
// EndTransaction: that call aborts instead of committing, and returns
// nil, when the client has not yet marked a partition as added to the
// transaction, and under load a flushed transaction of franz-go 1.22 can
// be in that state although the brokers acknowledged its records. The
// brokers' answer to EndTxn with the handle is the truth either way.
func (s *txnSystem) Commit(ctx context.Context, p twophase.Pending) error {
	h, err := decodeHandle(p.Handle)
	if err != nil {
		return err
	}
	err = s.endTxn(ctx, h)
	if cl := s.live[h.txnID]; cl != nil {
		delete(s.live, h.txnID)
		cl.Close()
	}
	return err
}

// retryable reports whether a transaction request that failed with err
// may succeed when repeated: CONCURRENT_TRANSACTIONS says that a commit or
// abort of the same transactional id is being completed.
func retryable(err error) bool {
	return kerr.IsRetriable(err) || errors.Is(err, kerr.ConcurrentTransactions)
}

// endTxnRetries bounds the retries of EndTxn on retryable errors (a
// commit or abort in progress, a coordinator moving).
const endTxnRetries = 50

func (s *txnSystem) endTxn(ctx context.Context, h handle) error {
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = h.txnID, h.pid, h.epoch, true
	backoff := 20 * time.Millisecond
	for try := 0; ; try++ {
		resp, err := req.RequestWith(ctx, s.admin)
		if err != nil {
			return fmt.Errorf("kafka sink: commit transactional id %s: %w", h.txnID, unreachable("kafka sink", s.spec.servers, err, s.hook))
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, kerr.InvalidProducerIDMapping), errors.Is(err, kerr.TransactionalIDNotFound):
			return fmt.Errorf("kafka sink: commit transactional id %s (producer id %d, epoch %d): %w: %w; the brokers no longer know it (transactional.id.expiration.ms passed?), so its records may be lost",
				h.txnID, h.pid, h.epoch, err, twophase.ErrNotFound)
		case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch), errors.Is(err, kerr.InvalidTxnState):
			return fmt.Errorf("kafka sink: commit transactional id %s (producer id %d, epoch %d): %w: %w; the brokers aborted it, most likely because it was open longer than transactionTimeout %s: its records are lost; raise transactionTimeout well above the checkpoint interval",
				h.txnID, h.pid, h.epoch, err, ErrTransactionLost, s.spec.txTimeout)
		case retryable(err) && try < endTxnRetries:
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		default:
			return fmt.Errorf("kafka sink: commit transactional id %s (producer id %d, epoch %d): %w", h.txnID, h.pid, h.epoch, err)
		}
	}
}

// Recover aborts the open transactions that earlier attempts of the
// subtasks in r.Subtasks left (see the type's comment).
func (s *txnSystem) Recover(ctx context.Context, r twophase.Recovery) error {
	prefixes := []string{s.prefix}
	if s.spec.cfg.TransactionalIDPrefix == "" && r.RestoreJobID != "" && r.RestoreJobID != s.octx.JobID {
		prefixes = append(prefixes, defaultPrefix(r.RestoreJobID, s.octx.OperatorUID))
	}
	keep := make(map[string]bool)
	for name := range r.KeepNames {
		for _, job := range []string{s.octx.JobID, r.RestoreJobID} {
			if st, _, ck, _, ok := twophase.ParseName(name, job, s.octx.OperatorUID); ok {
				p := s.prefix
				if s.spec.cfg.TransactionalIDPrefix == "" {
					p = defaultPrefix(job, s.octx.OperatorUID)
				}
				keep[transactionalID(p, st, ck)] = true
			}
		}
	}
	subtasks := make(map[int]bool)
	for _, st := range r.Subtasks {
		subtasks[st] = true
	}
	if !s.listTxns {
		return s.recoverByProbing(ctx, prefixes, r, keep)
	}
	open, err := kadm.NewClient(s.admin).ListTransactions(ctx, nil, []string{"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
	if err != nil {
		return fmt.Errorf("kafka sink: list open transactions: %w", err)
	}
	var abort []string
	for id, t := range open {
		if t.State == "Empty" || t.State == "CompleteCommit" || t.State == "CompleteAbort" || t.State == "Dead" || keep[id] {
			continue // listed by brokers that ignore the state filter
		}
		for _, p := range prefixes {
			if st, _, ok := parseTransactionalID(id, p); ok && subtasks[st] {
				abort = append(abort, id)
			}
		}
	}
	slices.Sort(abort)
	for _, id := range abort {
		if _, err := s.initProducer(ctx, id); err != nil {
			return err
		}
		s.log.Info("kafka sink: aborted a transaction left open by an earlier attempt", "transactionalId", id)
	}
	return nil
}

// maxProbes bounds the ids recoverByProbing tries per subtask.
const maxProbes = 1000

// recoverByProbing aborts leftovers on brokers without ListTransactions:
// for each subtask it initialises the ids after the restored checkpoint
// until one was never used.
func (s *txnSystem) recoverByProbing(ctx context.Context, prefixes []string, r twophase.Recovery, keep map[string]bool) error {
	s.log.Warn("kafka sink: the brokers do not support ListTransactions (Kafka 3.0+); aborting leftovers by probing transactional ids, which misses a leftover after a checkpoint without rows (it is aborted when its transactionTimeout passes)")
	for _, p := range prefixes {
		for _, st := range r.Subtasks {
			for ck := r.CheckpointID + 1; ck <= r.CheckpointID+maxProbes; ck++ {
				id := transactionalID(p, st, ck)
				if keep[id] {
					continue
				}
				epoch, err := s.initProducer(ctx, id)
				if err != nil {
					return err
				}
				if epoch == 0 {
					break // never used before
				}
			}
		}
	}
	return nil
}

// initProducer initialises a producer for transactional id txnID, which
// fences its earlier producers and aborts their open transaction, and
// returns the new epoch (0 for an id never used).
func (s *txnSystem) initProducer(ctx context.Context, txnID string) (int16, error) {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = &txnID
	req.TransactionTimeoutMillis = int32(min(s.spec.txTimeout.Milliseconds(), 1<<31-1))
	backoff := 20 * time.Millisecond
	for try := 0; ; try++ {
		resp, err := req.RequestWith(ctx, s.admin)
		if err != nil {
			return 0, fmt.Errorf("kafka sink: abort transactional id %s: %w", txnID, unreachable("kafka sink", s.spec.servers, err, s.hook))
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		switch {
		case err == nil:
			return resp.ProducerEpoch, nil
		case retryable(err) && try < endTxnRetries:
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		default:
			return 0, fmt.Errorf("kafka sink: abort transactional id %s: %w", txnID, err)
		}
	}
}

// Close closes the producers of pre-committed transactions (which stay
// open for a restore to commit) and the admin client. The twophase
// operator has aborted the transaction that was open, if any; when it did
// not (a test simulating a crash), that transaction stays open, as after a
// crash, until a restore aborts it.
func (s *txnSystem) Close() error {
	for id, cl := range s.live {
		cl.Close()
		delete(s.live, id)
	}
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	return nil
}
