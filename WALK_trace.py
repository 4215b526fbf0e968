import sys, os
sys.path.insert(0, os.getcwd())
import packing
packing.pack([[1, 2], [3, 4, 5], [6]], 4)  # warm (numba)
LAYERS = ["cli", "hf|ray|torch", "streaming", "layouts", "batches", "weighting", "reading", "text|comparison",
          "planning|optimal", "recipe", "strategies", "core|workloads", "errors"]
def layer(mod):
    top = mod.split(".")[1] if "." in mod else mod
    for i, l in enumerate(LAYERS):
        if top in l.split("|"):
            return i, l
    return 99, top
root = os.path.join(os.getcwd(), "packing")
events = []
depth = [0]
def prof(frame, event, arg):
    if event == "call":
        f = frame.f_code.co_filename
        if f.startswith(root):
            mod = "packing." + os.path.relpath(f, root)[:-3].replace("/", ".")
            events.append((depth[0], mod, frame.f_code.co_name))
        depth[0] += 1
    elif event == "return":
        depth[0] -= 1
sys.setprofile(prof)
b = packing.pack([[1, 2], [3, 4, 5], [6]], 4)
ids = b.input_ids  # the columns a caller reads
sys.setprofile(None)
base = events[0][0]
prev = None
climbs = 0
mods = set()
full = "-v" in sys.argv
MAXD = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else None
ACCESSORS = {"lengths", "num_blocks", "__hash__", "__eq__", "_identity", "_tokenizer_key", "max_seq_length", "loss_rules", "read_options", "document_multiple", "units", "stats", "int64"}
shown = 0
for d, mod, fn in events:
    if fn.startswith("<") and not full:  # comprehensions, genexprs
        continue
    if MAXD is not None and (d - base > MAXD or fn in ACCESSORS):
        continue
    li, ln = layer(mod)
    mods.add(mod)
    up = prev is not None and li < prev
    climbs += up
    prev = li
    shown += 1
    print(f"{'  ' * (d - base)}{fn}  [{mod} · {ln}]{'  ↑' if up else ''}")
print(f"stops={shown} modules={len(mods)} climb-backs={climbs}")
