# Turns the list of function names hottest.awk prints into the linker script PACKAGE/link-order.ld:
# an output section .text.hot, placed before .text, holding the sections of those functions in
# that order (`INSERT BEFORE` keeps the linker's default layout for everything else; LLD and GNU
# ld both read it). With `-ffunction-sections`, which rustc uses on ELF targets, each function
# is a section named `.text.` and its symbol.
#
# LLVM puts a function it deems cold (`#[cold]`, such as alloc's `finish_grow`) in a section
# named `.text.unlikely.` and its symbol; both spellings are placed, for a cold function can run
# all the time (72 of the functions that ran in the static csi-provisioner were such).
#
# v0 names (`_R...`) are the workspace's and the standard library's functions. Each is made to
# match the same function in another build (another profile, target or feature set):
# - a crate's disambiguator (`Cs` base-62 `_`) becomes a wildcard: it changes with the profile's
#   settings and the target;
# - so does every back-reference (`B` base-62 `_`): a byte offset into the name, which moves
#   when a disambiguator before it is shorter or longer;
# - the instantiating crate at the end (a crate root or a back-reference after the path) goes:
#   which crate instantiates a generic function follows the features and the inlining;
# - callgrind's recursion mark (`'2`) and the suffixes LLVM appends (`.llvm.NNN` of LTO, `.NN`
#   of clones) go, and a trailing wildcard matches whatever suffix the build has.
# A wildcard can only widen a match, never miss the function it came from.
#
# Other names are C functions: the C library's (malloc, memcpy, pow), libgcc's (`__floattidf`)
# and others' (compiler-builtins, a Rust crate with C names and one section per function). The
# static build links glibc's libc.a, libm's archive and libgcc.a, whose objects are not split
# into a section per function, so such a function is named by its object: `-v members=FILE`
# reads `SYMBOL ARCHIVE:OBJECT` lines (generate.sh makes them with nm) and each object that holds
# a function that ran is placed whole. A C name no archive holds is placed by its section, as a
# v0 name but exact. The dynamic build's libc.so matches none of these lines.
BEGIN {
    if (members != "") while ((getline line < members) > 0) {
        split(line, field, " ")
        if (!(field[1] in object)) object[field[1]] = field[2]
    }
}

# A legacy Rust name (none in a v0 build) ends in a hash of the build: dropped.
/^_ZN/ { next }

!/^_R/ {
    name = $0
    sub(/'[0-9]+$/, "", name)
    # callgrind names code without a symbol by its address (`0x...`) and the start-up frames
    # `(below main)`: nothing a section is named after.
    if (name !~ /^[A-Za-z_][A-Za-z0-9_.]*$/) next
    if (name in object) add("*" object[name] "(.text .text.*)")
    else add("*(.text." name " .text.unlikely." name ")")
    next
}

{
    name = $0
    sub(/'[0-9]+$/, "", name)
    sub(/\.llvm\.[0-9]+$/, "", name)
    sub(/\.[0-9]+$/, "", name)
    gsub(/Cs[0-9A-Za-z]+_/, "Cs*_", name)
    gsub(/B[0-9A-Za-z]*_/, "B*_", name)
    name = without_instantiating_crate(name)
    add("*(.text." name "* .text.unlikely." name "*)")
}

function add(entry) {
    if (!(entry in seen)) { seen[entry] = 1; order[++count] = entry }
}

# The name without a trailing instantiating crate: a back-reference, or `Cs*_` and a
# length-prefixed identifier that ends the name exactly (a path's own `Cs*_4core3fmt5write` is
# longer than its first identifier, so it stays).
function without_instantiating_crate(name,    at, next_at, rest, digits) {
    if (name ~ /B\*_$/) return substr(name, 1, length(name) - 3)
    at = 0
    while ((next_at = index(substr(name, at + 1), "Cs*_")) > 0) at += next_at
    if (at == 0) return name
    rest = substr(name, at + 4)
    if (!match(rest, /^[0-9]+/)) return name
    digits = RLENGTH
    if (length(rest) == digits + substr(rest, 1, digits)) return substr(name, 1, at - 1)
    return name
}

END {
    print "/* Made by deploy/link-order/generate.sh; see deploy/link-order/build.rs. */"
    print "SECTIONS {"
    print "  .text.hot : {"
    for (i = 1; i <= count; i++) print "    " order[i]
    print "  }"
    print "}"
    print "INSERT BEFORE .text;"
}
