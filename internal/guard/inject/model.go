package inject

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
)

// The classifier: multinomial logistic regression (benign, injection,
// jailbreak) over hashed word and character n-grams. The feature vector is
// the count of each bucket divided by the square root of the number of
// feature occurrences, so a score does not grow with the length of the text.
// Long texts are also scored in overlapping windows and the most attack-like
// window counts, so that an instruction planted in a long benign document is
// not diluted by it (see Model.Score).

// Classes, in the order of the model's outputs.
const (
	LabelBenign    = "benign"
	LabelInjection = "injection"
	LabelJailbreak = "jailbreak"
)

var classes = [numClasses]string{LabelBenign, LabelInjection, LabelJailbreak}

const numClasses = 3

const modelMagic = "WGINJ\x01"

//go:embed model.bin
var embeddedModel []byte

// header is the JSON header of a model file.
type header struct {
	Bits      uint8 `json:"bits"`
	CharMin   uint8 `json:"char_min"`
	CharMax   uint8 `json:"char_max"`
	WordGrams uint8 `json:"word_grams"`
	// Window and Stride, in bytes, for scoring long texts; 0: whole text only.
	Window int `json:"window"`
	Stride int `json:"stride"`
	// Threshold on the attack probability, chosen by cross-validation on the
	// training split.
	Threshold float64             `json:"threshold"`
	Bias      [numClasses]float32 `json:"bias"`
	Scale     float32             `json:"scale"` // weight = int16 * Scale
	Training  TrainInfo           `json:"training"`
}

// TrainInfo records how a model was trained.
type TrainInfo struct {
	Data     []string `json:"data"`
	Split    string   `json:"split"`
	Examples int      `json:"examples"`
	Epochs   int      `json:"epochs"`
	LR       float64  `json:"lr"`
	L2       float64  `json:"l2"`
	Seed     uint64   `json:"seed"`
	Folds    int      `json:"folds"`
	MaxFPR   float64  `json:"max_fpr"`
	// Out-of-fold figures at Threshold, on the training split.
	CVFPR    float64 `json:"cv_fpr"`
	CVRecall float64 `json:"cv_recall"`
}

// Model is a trained classifier. It is safe for concurrent use.
type Model struct {
	h    header
	spec featureSpec
	w    []float32 // bucket-major: w[bucket*numClasses+class]
	pool sync.Pool // *extractor
}

// Threshold is the attack probability at or above which a text is an
// attack.
func (m *Model) Threshold() float64 { return m.h.Threshold }

// Info returns how the model was trained.
func (m *Model) Info() TrainInfo { return m.h.Training }

var (
	defaultOnce  sync.Once
	defaultModel *Model
	defaultErr   error
)

// DefaultModel returns the model committed with the source
// (internal/guard/inject/model.bin, trained by cmd/guard-train).
func DefaultModel() (*Model, error) {
	defaultOnce.Do(func() {
		defaultModel, defaultErr = ReadModel(bytes.NewReader(embeddedModel))
		if defaultErr != nil {
			defaultErr = fmt.Errorf("embedded injection model: %w", defaultErr)
		}
	})
	return defaultModel, defaultErr
}

// maxModelBytes bounds a decompressed model file (2^24 buckets).
const maxModelBytes = 1<<24*numClasses*2 + 1<<20

// ReadModel reads a model file written by Model.Write.
func ReadModel(r io.Reader) (*Model, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxModelBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	if len(data) > maxModelBytes {
		return nil, errors.New("read model: file too large")
	}
	if !bytes.HasPrefix(data, []byte(modelMagic)) || len(data) < len(modelMagic)+4 {
		return nil, errors.New("read model: not an injection model file")
	}
	data = data[len(modelMagic):]
	hl := binary.LittleEndian.Uint32(data)
	data = data[4:]
	if uint64(hl) > uint64(len(data)) {
		return nil, errors.New("read model: truncated header")
	}
	var h header
	if err := json.Unmarshal(data[:hl], &h); err != nil {
		return nil, fmt.Errorf("read model header: %w", err)
	}
	data = data[hl:]
	if h.Bits < 8 || h.Bits > 24 || h.CharMax > 16 || h.CharMin > h.CharMax || h.Window < 0 || h.Stride < 0 ||
		(h.Window > 0 && (h.Stride == 0 || h.Window%h.Stride != 0)) {
		return nil, errors.New("read model: bad header")
	}
	n := (1 << h.Bits) * numClasses
	if len(data) != 2*n {
		return nil, fmt.Errorf("read model: %d weight bytes, want %d", len(data), 2*n)
	}
	m := &Model{h: h, spec: h.spec(), w: make([]float32, n)}
	for i := range m.w {
		m.w[i] = float32(int16(binary.LittleEndian.Uint16(data[2*i:]))) * h.Scale
	}
	return m, nil
}

func (h header) spec() featureSpec {
	return featureSpec{Bits: h.Bits, CharMin: h.CharMin, CharMax: h.CharMax, WordGrams: h.WordGrams, Block: h.Stride}
}

// Write writes the model, its weights quantised to 16 bits, gzip-compressed.
// The output is a function of the model alone (no time stamps), so retraining
// with the same data and seed gives the same bytes.
func (m *Model) Write(w io.Writer) error {
	var maxAbs float32
	for _, v := range m.w {
		maxAbs = max(maxAbs, float32(math.Abs(float64(v))))
	}
	h := m.h
	h.Scale = maxAbs / 32767
	if h.Scale == 0 {
		h.Scale = 1
	}
	hj, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("write model: %w", err)
	}
	var buf bytes.Buffer
	buf.WriteString(modelMagic)
	buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(hj))))
	buf.Write(hj)
	q := make([]byte, 2*len(m.w))
	for i, v := range m.w {
		binary.LittleEndian.PutUint16(q[2*i:], uint16(int16(math.Round(float64(v/h.Scale)))))
	}
	buf.Write(q)
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return fmt.Errorf("write model: %w", err)
	}
	if _, err := zw.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write model: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write model: %w", err)
	}
	return nil
}

// Prediction is the classifier's output for one text.
type Prediction struct {
	// Attack is the probability that the text is an injection or a
	// jailbreak (the sum of the two class probabilities).
	Attack float64
	// Injection and Jailbreak are the two class probabilities.
	Injection, Jailbreak float64
	// Label is the most likely attack class when Attack is at or above the
	// threshold, else LabelBenign.
	Label string
	// Start and End are the byte span of the window that scored highest
	// (the whole text when it was scored whole).
	Start, End int
}

// Score classifies text. A text longer than the model's window is scored in
// windows of Window normalised bytes every Stride bytes, and the most
// attack-like window counts: an instruction planted in a long benign
// document would otherwise be diluted by it, and a long repetitive text
// cannot pile up evidence. The features are extracted once; a window sums
// the weights of the features that start in it.
func (m *Model) Score(text string) Prediction {
	e, _ := m.pool.Get().(*extractor)
	if e == nil {
		e = newExtractor(m.spec)
	}
	defer m.pool.Put(e)
	feats := e.features(text)
	var best Prediction
	if m.h.Window == 0 || e.topLen <= m.h.Window {
		var z [numClasses]float32
		for _, f := range feats {
			w := m.w[int(f)*numClasses : int(f)*numClasses+numClasses]
			z[0] += w[0]
			z[1] += w[1]
			z[2] += w[2]
		}
		best = m.predict(z, len(feats), 0, len(text))
	} else {
		best = m.scoreWindows(e, text, feats)
	}
	best.Label = LabelBenign
	if best.Attack >= m.h.Threshold {
		best.Label = LabelInjection
		if best.Jailbreak > best.Injection {
			best.Label = LabelJailbreak
		}
	}
	return best
}

func (m *Model) scoreWindows(e *extractor, text string, feats []uint32) Prediction {
	stride := m.h.Stride
	nb := (e.topLen + stride - 1) / stride
	e.blockZ = append(e.blockZ[:0], make([][numClasses]float32, nb)...)
	e.blockN = append(e.blockN[:0], make([]int32, nb)...)
	var gz [numClasses]float32 // features of the whole text (flags)
	gn := 0
	for i, f := range feats {
		w := m.w[int(f)*numClasses : int(f)*numClasses+numClasses]
		p := e.pos[i]
		if p < 0 {
			gz[0] += w[0]
			gz[1] += w[1]
			gz[2] += w[2]
			gn++
			continue
		}
		b := min(int(p)/stride, nb-1)
		e.blockZ[b][0] += w[0]
		e.blockZ[b][1] += w[1]
		e.blockZ[b][2] += w[2]
		e.blockN[b]++
	}
	best := Prediction{Attack: -1}
	wb := m.h.Window / stride
	for k := 0; k+wb <= nb; k++ {
		z, n := gz, gn
		for b := k; b < k+wb; b++ {
			for c := range numClasses {
				z[c] += e.blockZ[b][c]
			}
			n += int(e.blockN[b])
		}
		start, end := e.offs[k*stride], len(text)
		if j := (k + wb) * stride; j < e.topLen {
			end = int(e.offs[j])
		}
		if p := m.predict(z, n, int(start), end); p.Attack > best.Attack {
			best = p
		}
	}
	return best
}

// predict turns summed weights over n feature occurrences into class
// probabilities.
func (m *Model) predict(z [numClasses]float32, n, start, end int) Prediction {
	scale := float32(1 / math.Sqrt(float64(max(1, n))))
	var logits [numClasses]float64
	for c := range z {
		logits[c] = float64(z[c]*scale + m.h.Bias[c])
	}
	p := softmax(logits)
	return Prediction{Attack: p[1] + p[2], Injection: p[1], Jailbreak: p[2], Start: start, End: end}
}

func softmax(z [numClasses]float64) [numClasses]float64 {
	mx := max(z[0], z[1], z[2])
	var sum float64
	var p [numClasses]float64
	for c := range z {
		p[c] = math.Exp(z[c] - mx)
		sum += p[c]
	}
	for c := range p {
		p[c] /= sum
	}
	return p
}
