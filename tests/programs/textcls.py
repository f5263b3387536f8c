# A little text classifier on the CPU: tokenise in Python per sample, an EmbeddingBag model, predictions appended
# to a CSV each batch. Prints its own loop time.
import csv, sys, time, random  # noqa: E401 (as the user wrote it: the traces name its lines)
import torch, nvtx  # noqa: E401

VOCAB = 5000
random.seed(0)
WORDS = [f"w{i}" for i in range(VOCAB)]
DOCS = [" ".join(random.choice(WORDS) for _ in range(200)) for _ in range(2000)]

def tokenize(doc):
    ids = []
    for w in doc.split():
        ids.append(int(w[1:]) % VOCAB)
    return ids

model = torch.nn.EmbeddingBag(VOCAB, 64)
head = torch.nn.Linear(64, 4)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
t0 = time.perf_counter()
with open("/tmp/fresh-progs/preds.csv", "w", newline="") as f:
    out = csv.writer(f)
    for step in range(steps):
        with nvtx.annotate(f"step {step}"):
            batch = DOCS[(step * 32) % 2000:(step * 32) % 2000 + 32]
            toks = [torch.tensor(tokenize(d)) for d in batch]
            offsets = torch.tensor([0] + [len(t) for t in toks[:-1]]).cumsum(0)
            logits = head(model(torch.cat(toks), offsets))
            for row in logits:
                out.writerow([int(row.argmax().item())])
print(f"loop_s={time.perf_counter() - t0:.3f}")
