# Reads callgrind output files (written with --compress-strings=no --demangle=no) and prints
# each function that ran, one symbol name per line, the most instructions spent in the
# function itself first (ties by name, so the same profile gives the same file).
#
# The format (valgrind's callgrind format specification): `fn=NAME` starts the costs of a
# function; `cfn=NAME` names a function it called; `calls=COUNT TARGET` is followed by one
# cost line that is the call's inclusive cost, not the caller's own, so it is skipped; any
# other line starting with a digit, `+`, `-` or `*` is `POSITION COST` of the current function.
/^fn=/ { current = substr($0, 4); self[current] += 0; next }
/^cfn=/ { self[substr($0, 5)] += 0; next }
/^calls=/ { skip = 1; next }
/^[0-9+*-]/ {
    if (skip) { skip = 0; next }
    if (current != "") self[current] += $2
    next
}
END { for (name in self) printf "%d %s\n", self[name], name }
