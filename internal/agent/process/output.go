package process

import (
	"sync"

	pb "github.com/warden-sandbox/warden/internal/agentpb/process"
)

type dataKind uint8

const (
	kindStdout dataKind = iota
	kindStderr
	kindPTY
)

// chunk is one read from a process's stdout, stderr or PTY.
type chunk struct {
	kind dataKind
	data []byte
	off  int64 // offset of data[0] in the process's whole output
}

func (c chunk) event() *pb.ProcessEvent {
	d := &pb.ProcessEvent_DataEvent{}
	switch c.kind {
	case kindStdout:
		d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: c.data}
	case kindStderr:
		d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: c.data}
	default:
		d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: c.data}
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}
}

// cursor is a subscriber's position in an output log: the sequence number of
// the next chunk it will read.
type cursor struct{ next uint64 }

// output is the output log of one process: the most recent ring bytes are
// retained for replay (oldest chunks dropped first), and every subscriber
// (a Start or Connect stream) reads it at its own cursor.
//
// While the process runs, a subscriber more than maxLag bytes behind makes
// the producers wait (backpressure, like a pipe to a slow reader), so a live
// stream never loses output; a stream whose client goes away unsubscribes and
// releases it. Once the process has exited the producers never wait: what is
// left is bounded by the pipe buffers and the drain limits.
type output struct {
	mu     sync.Mutex
	space  *sync.Cond // producers waiting for slow subscribers
	chunks []chunk
	first  uint64 // sequence number of chunks[0]
	size   int64  // bytes in chunks
	head   int64  // bytes ever appended
	ring   int64
	maxLag int64
	subs   map[*cursor]struct{}
	wake   chan struct{} // closed and replaced whenever something new is readable
	noWait bool          // no more backpressure: the process has exited
	end    *pb.ProcessEvent_EndEvent
}

func newOutput(ring int64) *output {
	o := &output{ring: ring, maxLag: ring, subs: map[*cursor]struct{}{}, wake: make(chan struct{})}
	o.space = sync.NewCond(&o.mu)
	return o
}

// lagLocked is how many bytes the slowest subscriber has yet to read.
func (o *output) lagLocked() int64 {
	var lag int64
	n := o.first + uint64(len(o.chunks))
	for c := range o.subs {
		if c.next < n {
			i := c.next
			if i < o.first {
				i = o.first
			}
			if l := o.head - o.chunks[i-o.first].off; l > lag {
				lag = l
			}
		}
	}
	return lag
}

// trimLocked drops the oldest chunks beyond the ring size that no subscriber
// still has to read.
func (o *output) trimLocked() {
	min := o.first + uint64(len(o.chunks))
	for c := range o.subs {
		if c.next < min {
			min = c.next
		}
	}
	for o.size > o.ring && len(o.chunks) > 0 && o.first < min {
		o.size -= int64(len(o.chunks[0].data))
		o.chunks[0] = chunk{}
		o.chunks = o.chunks[1:]
		o.first++
	}
}

func (o *output) notifyLocked() {
	close(o.wake)
	o.wake = make(chan struct{})
}

// append adds data (owned by the log from now on), waiting while a live
// subscriber lags too far behind.
func (o *output) append(kind dataKind, data []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for !o.noWait && o.lagLocked() > o.maxLag {
		o.space.Wait()
	}
	o.chunks = append(o.chunks, chunk{kind: kind, data: data, off: o.head})
	o.head += int64(len(data))
	o.size += int64(len(data))
	o.trimLocked()
	o.notifyLocked()
}

// subscribe adds a subscriber that reads from the oldest retained chunk
// (replay) or from the next chunk to come.
func (o *output) subscribe(replay bool) *cursor {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := &cursor{next: o.first + uint64(len(o.chunks))}
	if replay {
		c.next = o.first
	}
	o.subs[c] = struct{}{}
	return c
}

// snapshot is where a snapshot stream stops: the sequence number after the
// last chunk retained when it subscribed, and whether the log had ended then.
type snapshot struct {
	next  uint64
	ended bool
}

// subscribeAt is subscribe that also returns how many bytes of output had
// been dropped before the first retained chunk, and the snapshot at this
// moment.
func (o *output) subscribeAt(replay bool) (*cursor, int64, *snapshot) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.first + uint64(len(o.chunks))
	c := &cursor{next: n}
	if replay {
		c.next = o.first
	}
	o.subs[c] = struct{}{}
	return c, o.head - o.size, &snapshot{next: n, ended: o.end != nil}
}

func (o *output) unsubscribe(c *cursor) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.subs, c)
	o.trimLocked()
	o.space.Broadcast()
}

// next returns the subscriber's next chunk if there is one. Otherwise it
// returns the end event once the log is finished, or a channel closed when
// there may be something new.
func (o *output) next(c *cursor) (ch chunk, ok bool, end *pb.ProcessEvent_EndEvent, wake <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c.next < o.first {
		c.next = o.first // cannot happen for a subscriber: trimming waits for it
	}
	if i := c.next - o.first; i < uint64(len(o.chunks)) {
		ch = o.chunks[i]
		c.next++
		if o.size > o.ring {
			o.trimLocked()
		}
		o.space.Broadcast()
		return ch, true, nil, nil
	}
	return chunk{}, false, o.end, o.wake
}

// release stops backpressure for good: the process has exited.
func (o *output) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.noWait = true
	o.space.Broadcast()
}

// finish records the end event; subscribers get it after the last chunk.
func (o *output) finish(end *pb.ProcessEvent_EndEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.noWait = true
	o.end = end
	o.notifyLocked()
	o.space.Broadcast()
}
