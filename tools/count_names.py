#!/usr/bin/env python3
"""Counts the names the library declares directly in namespace ppsched (what a user can spell
as ppsched::x) and in ppsched::detail (implementation), so that issue 26's "how many public
names" has one repeatable answer.

Usage: count_names.py SOURCE_ROOT [--list]

How it counts. Every file under include/ppsched (.hpp, .ipp, .cuh) is read with comments,
string and character literals and preprocessor lines removed, so both branches of an #if are
read (a name declared in either counts once). The text is split into tokens and walked with a
stack of scopes; only statements whose innermost scope is a namespace are looked at, and class,
enum and function bodies and initialisers are skipped whole, so members, enumerators of
scoped enums and locals never count. A statement declares:
  - a type: `class`/`struct`/`union` X, `enum [class]` X (definition or forward declaration),
    and a `concept` X;
  - an alias: `using X = ...`, a using-declaration `using a::X` (it makes X spellable here);
  - a function: the unqualified identifier before the statement's first top-level `(`;
  - a variable: the identifier before its initialiser (`=` or `{`) or before the `;`.
Names are counted once per namespace (overloads, specialisations, a declaration and its
definition are one name). Operator overloads, qualified definitions (`T a::f() {}`),
explicit instantiations, static_assert and `using namespace` add no name and are skipped.
The mode's inline namespace (ppsched::inline PPSCHED_MODE) is transparent: a name in it is a
name in ppsched. Namespaces nested deeper (ppsched::detail::cpu, ppsched::backend_ops) are
counted apart and listed under their own heading. Unscoped enums' enumerators are not
counted (there are none at the time of writing; the script says if it meets one).
"""
import os
import re
import sys

TOKEN_RE = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|::|->|&&|\|\||<=|>=|==|!=|\.\.\.|\S")
TYPE_KEYS = {"class", "struct", "union", "enum"}
SKIP_WORDS = {"inline", "constexpr", "consteval", "constinit", "static", "extern", "const", "volatile",
              "typename", "PPSCHED_OUTLINE", "explicit", "friend", "virtual", "noexcept", "mutable",
              "thread_local", "unsigned", "signed", "long", "short", "auto", "final"}


def strip_source(text):
    """Comments, literals and preprocessor lines out; newlines kept so nothing joins."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":
            while i < n and text[i] != "\n":  # a directive, with its continuation lines
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    i += 2
                    continue
                i += 1
            continue
        at_line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
            continue
        m = re.match(r'(?:u8|u|U|L)?R"([^(\s]*)\(', text[i:i + 40])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + m.group(1) + '"', i + m.end())
            i = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""')
            continue
        if c in "\"'":
            # A digit separator (1'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append('""')
            continue
        if c == "\n":
            at_line_start = True
        out.append(c)
        i += 1
    return "".join(out)


def skip_group(tokens, i, open_, close):
    """tokens[i] is `open_`; returns the index after its matching `close`."""
    depth = 0
    while i < len(tokens):
        if tokens[i] == open_:
            depth += 1
        elif tokens[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def drop_template_heads(stmt):
    """`template <...>` prefixes and `[[...]]` attributes out, so `<` and `=` inside them do
    not confuse the rest."""
    out = []
    i = 0
    while i < len(stmt):
        if stmt[i] == "template" and i + 1 < len(stmt) and stmt[i + 1] == "<":
            depth = 0
            j = i + 1
            while j < len(stmt):
                if stmt[j] == "<":
                    depth += 1
                elif stmt[j] == ">":
                    depth -= 1
                    if depth == 0:
                        break
                elif stmt[j] == "(":
                    j = skip_group(stmt, j, "(", ")") - 1
                j += 1
            i = j + 1
            continue
        if stmt[i] == "[" and i + 1 < len(stmt) and stmt[i + 1] == "[":
            j = i + 2
            while j + 1 < len(stmt) and not (stmt[j] == "]" and stmt[j + 1] == "]"):
                j += 1
            i = j + 2
            continue
        if stmt[i] == "requires":  # a requires-clause: one primary or a parenthesised group
            j = i + 1
            while j < len(stmt):
                if stmt[j] == "(":
                    j = skip_group(stmt, j, "(", ")")
                else:
                    while j < len(stmt) and (re.match(r"\w", stmt[j]) or stmt[j] == "::"):
                        j += 1
                    if j < len(stmt) and stmt[j] == "<":
                        depth = 0
                        while j < len(stmt):
                            depth += stmt[j] == "<"
                            depth -= stmt[j] == ">"
                            j += 1
                            if depth == 0:
                                break
                if j < len(stmt) and stmt[j] in ("&&", "||"):
                    j += 1
                    continue
                break
            i = j
            continue
        out.append(stmt[i])
        i += 1
    return out


def classify(stmt, has_body):
    """(kind, name) for one namespace-scope statement, or None if it declares no name."""
    if not stmt:
        return None
    if stmt[0] == "template" and (len(stmt) < 2 or stmt[1] != "<"):
        return None  # explicit instantiation
    if stmt[0] == "extern" and len(stmt) > 1 and stmt[1] == "template":
        return None
    s = drop_template_heads(stmt)
    if not s or s[0] in ("static_assert", "namespace"):
        return None
    if s[0] == "using":
        if len(s) > 1 and s[1] == "namespace":
            return None
        if "=" in s:
            return ("alias", s[1])
        return ("alias", s[-1])  # using a::b::X
    if "concept" in s:
        return ("type", s[s.index("concept") + 1])
    if "operator" in s:
        return None
    # The statement's top level: parentheses and template arguments folded away.
    top = []
    depth_paren = 0
    for t in s:
        if t == "(":
            if depth_paren == 0:
                top.append("(")
            depth_paren += 1
        elif t == ")":
            depth_paren -= 1
        elif depth_paren == 0:
            top.append(t)
    for k in range(len(top)):
        if top[k] in TYPE_KEYS:
            # `struct X {`, `struct X;`, `enum class X : int {`; not `struct X f(...)` (none here)
            j = k + 1
            while j < len(top) and top[j] in ("class", "struct", "alignas"):
                j += 1
            if j < len(top) and re.match(r"[A-Za-z_]", top[j]):
                name = top[j]
                rest = top[j + 1:]
                if "(" in rest and "=" not in rest and not (rest and rest[0] in (":", "<")):
                    break  # a function returning an elaborated type
                if top[k] == "enum" and (k + 1 >= len(top) or top[k + 1] not in ("class", "struct")) and has_body:
                    print(f"note: unscoped enum {name}: its enumerators are not counted", file=sys.stderr)
                return ("type", name)
            return None
    # A function: the identifier before the first top-level `(`, unless a `=` comes first
    # (then it is a variable whose initialiser calls something).
    eq = top.index("=") if "=" in top else len(top)
    par = top.index("(") if "(" in top else len(top)
    if par < eq:
        name_at = par - 1
        # decltype(x) v = ... / alignas(...) : the `(` belongs to a specifier
        while name_at >= 0 and top[name_at] in ("decltype", "alignas", "noexcept", "__attribute__"):
            rest_par = top.index("(", par + 1) if "(" in top[par + 1:] else len(top)
            if rest_par < eq:
                par = rest_par
                name_at = par - 1
            else:
                name_at = -1
        if name_at >= 0 and re.match(r"[A-Za-z_]", top[name_at]) and top[name_at] not in SKIP_WORDS:
            if name_at > 0 and top[name_at - 1] in ("::", "~"):
                return None  # a qualified definition (or a destructor's): declared elsewhere
            return ("function", top[name_at])
        if name_at >= 0:
            return None
    # A variable: the last identifier before the initialiser or the end.
    end = eq
    if has_body and "=" not in top:
        end = len(top)
    cand = [t for t in top[:end] if re.match(r"[A-Za-z_]", t)]
    if len(cand) < 2:  # a lone word is not a declaration (a stray macro)
        return None
    if end > 0 and top[end - 1] in (">", "::"):
        return None
    name = top[end - 1] if end > 0 else None
    if name is None or not re.match(r"[A-Za-z_]", name) or name in SKIP_WORDS:
        return None
    if end > 1 and top[end - 2] == "::":
        return None
    return ("variable", name)


def namespace_path(stmt):
    """`namespace ppsched::inline PPSCHED_MODE::detail` -> ['ppsched', 'detail']"""
    parts = [t for t in stmt[1:] if t not in ("::", "inline", "PPSCHED_MODE")]
    return parts


def scan(text, found, where):
    tokens = TOKEN_RE.findall(strip_source(text))
    scopes = [[]]  # each entry: a namespace path (list) or None for any other brace scope
    stmt = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        ns = scopes[-1]
        if ns is None:
            # Inside a body we only track braces.
            if t == "{":
                scopes.append(None)
            elif t == "}":
                scopes.pop()
            i += 1
            continue
        if t == "}" and not stmt:
            scopes.pop()
            i += 1
            continue
        if t == ";":
            record(classify(stmt, False), ns, found, where)
            stmt = []
            i += 1
            continue
        if t == "{" and stmt.count("(") > stmt.count(")"):
            # A default argument's braces (`const Options& o = {}`), not a body.
            j = skip_group(tokens, i, "{", "}")
            stmt.extend(tokens[i:j])
            i = j
            continue
        if t == "{":
            if stmt and stmt[0] == "namespace":
                scopes.append(ns + namespace_path(stmt))
                stmt = []
                i += 1
                continue
            if stmt and stmt[0] == "extern":  # extern "C" { ... } keeps the namespace
                scopes.append(ns)
                stmt = []
                i += 1
                continue
            kind = classify(stmt, True)
            record(kind, ns, found, where)
            i = skip_group(tokens, i, "{", "}")
            # A function body ends the statement; a class, enum or braced initialiser
            # runs on to its `;` (which may declare a variable of the type: none here).
            # An operator's body, and a qualified definition's (`void A::f() {}`), end their
            # statement too (they declare no name): kept, it would swallow the next declaration.
            if (kind is not None and kind[0] == "function") or (kind is None and ("operator" in stmt or "(" in stmt)):
                stmt = []
            elif kind is not None and kind[0] in ("type", "variable"):
                while i < len(tokens) and tokens[i] != ";":
                    if tokens[i] == "{":
                        i = skip_group(tokens, i, "{", "}")
                        continue
                    i += 1
                stmt = []
            else:
                stmt = stmt + ["{}"]
            continue
        stmt.append(t)
        i += 1


def record(kind, ns, found, where):
    if kind is None or not ns or ns[0] != "ppsched":
        return
    key = "::".join(ns)
    found.setdefault(key, {}).setdefault(kind[1], (kind[0], where))


def main():
    root = os.path.abspath(sys.argv[1])
    listing = "--list" in sys.argv[2:]
    base = os.path.join(root, "include", "ppsched")
    found = {}
    for dirpath, _, names in sorted(os.walk(base)):
        for name in sorted(names):
            if not name.endswith((".hpp", ".ipp", ".cuh")):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                scan(f.read(), found, os.path.relpath(path, base))
    for key in sorted(found, key=lambda k: (k.count("::"), k)):
        names = found[key]
        kinds = {}
        for kind, _ in names.values():
            kinds[kind] = kinds.get(kind, 0) + 1
        plural = {"alias": "aliases"}
        detail = ", ".join(f"{kinds[k]} {plural.get(k, k + 's')}" if kinds[k] != 1 else f"1 {k}"
                           for k in sorted(kinds))
        print(f"{key}: {len(names)} names ({detail})")
        if listing:
            for n in sorted(names):
                print(f"    {n}  [{names[n][0]}, {names[n][1]}]")


if __name__ == "__main__":
    main()
