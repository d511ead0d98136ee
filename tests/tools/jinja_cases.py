#!/usr/bin/env python3
"""Small Jinja templates, each on the language feature it exercises, rendered by Jinja2 as
transformers sets it up (tests/tools/chat_reference.py's environment). `--write` stores the
results in tests/fixtures/chat/jinja_cases.json, which tests/unit/test_jinja.c checks upipe's
interpreter against without Jinja2; without flags the stored results are checked against
Jinja2 again (exit 1 when one differs, 77 without jinja2)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
try:
    from chat_reference import environment, TemplateError
except SystemExit:
    sys.exit(77)

MSGS = [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"}]
V = {"messages": MSGS, "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": True,
     "tools": None, "n": 7, "f": 2.5, "s": "  Grüße, Welt!  ", "l": [3, 1, 2], "e": [], "d":
     {"b": 1, "a": [1, "x", None, True, 1.5]}, "u8": "añb👍c", "neg": -7}

CASES = [
    # output, literals, whitespace control, trim_blocks / lstrip_blocks
    "plain text",
    "{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ 1.5 }}{{ true }}{{ none }}{{ undefined_name }}|",
    "{{ 'adjacent' 'strings' }}",
    "{{ '\\n\\t\\\\ \\x41 \\u00e9 \\U0001F600 \\101 \\q' }}",
    "a\n  {% if true %}\n    x\n  {% endif %}\nb\n",
    "a  {%- if true -%}  x  {%- endif -%}  b",
    "a  {{- 'x' -}}  b",
    "line\n    {%+ if true %}kept{% endif %}\n",
    "{% if true +%}\nnewline kept{% endif %}",
    "{# comment #}\n  {# indented comment #}\nafter",
    "x {#- trimmed -#} y",
    "a\r\nb\rc\n",
    "trailing newline dropped\n",
    "two trailing\n\n",
    # expressions and operators
    "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}",
    "{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 1e-5 }} {{ 123456789.0 * 1000000000 }} {{ 5 / 1 }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ undefined_name }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ [1,2] == [1,2] }} {{ 'a' != 'a' }}",
    "{{ 'b' in 'abc' }} {{ 2 in l }} {{ 'a' in d }} {{ 'z' not in d }} {{ 'x' in undefined_name }}",
    "{{ not 1 }} {{ 1 and 'x' }} {{ 0 or 'y' }} {{ none or none }} {{ 'a' if n > 3 else 'b' }} [{{ 'c' if false }}]",
    "{{ -n }} {{ +f }} {{ neg|abs }} {{ f|int }} {{ '42'|int + 1 }} {{ 'x'|int }} {{ '3.5'|float }}",
    # subscripts, slices, attributes
    "{{ l[0] }} {{ l[-1] }} {{ l[5] }}|{{ l[::-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ l[10:] }}",
    "{{ u8[1] }} {{ u8[::-1] }} {{ u8[1:4] }} {{ u8[-2:] }} {{ u8|length }} {{ u8|reverse }}",
    "{{ d.b }} {{ d['a'][1] }} {{ d.a.1 }} {{ d.missing }}|{{ messages[0].role }} {{ messages[-1]['content'] }}",
    "{{ d.items() | list }} {{ d.keys() | list }} {{ d.get('b') }} {{ d.get('q', 5) }} {{ d|items|list }}",
    # str(), repr of containers
    "{{ l }} {{ d }} {{ ['it\\'s', \"q\\\"\", 'both\\'\"', '\\n'] }} {{ (1, 2) }} {{ {'k': none} }}",
    # loops
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }},{% endfor %}",
    "{% for x in e %}never{% else %}empty{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}/{{ loop.length }} {% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héllo' %}{{ c }}.{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}",
    "{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }} {% endfor %}{% endfor %}{{ range(5, 0, -2)|list }}",
    "{% for m in messages %}{% set x = loop.index %}{% endfor %}[{{ x }}]",
    # set, namespace, macros
    "{% set a = 1 %}{% set b, c = 2, 3 %}{{ a }}{{ b }}{{ c }}{% set t %}block {{ a }}{% endset %}{{ t }}",
    "{% set ns = namespace(count=0, found=false) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}",
    "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content']|trim %}{% set messages = messages[1:] %}{% endif %}[{{ sys }}]{{ messages|length }}",
    # filters
    "[{{ s|trim }}] [{{ s|trim('! ') }}] {{ s|length }} {{ l|first }} {{ l|last }} {{ 'abc'|first }} {{ e|first }}|",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }}",
    "{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ messages|selectattr('content')|list|length }} {{ l|map('string')|join('-') }}",
    "{{ undefined_name|default('dflt') }} {{ ''|default('x') }} {{ ''|default('x', true) }} {{ none|default('n') }} {{ n|d(3) }}",
    "{{ 'Hello World'|upper }} {{ 'Hello World'|lower }} {{ 'hello world'|capitalize }} {{ 'hello big world'|title }}",
    "{{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|replace('', '.') }} {{ l|join }} {{ l|join(', ') }}",
    "{{ d|tojson }} {{ 'é\"\\n\\t\\u0001'|tojson }} {{ l|tojson(indent=2) }} {{ d|tojson(indent=4) }} {{ e|tojson(indent=2) }} {{ {}|tojson }}",
    "{{ d|tojson(separators=(',', ':')) }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1.0, 2.5e-7, none, true]|tojson }}",
    "{{ messages|length }} {{ d|length }} {{ 'añ'|count }} {{ undefined_name|length }} {{ l|string }} {{ 5|string ~ 'x' }}",
    "{{ '<a href=\"x\">&\\''|e }} {{ 'x'|safe }} {{ l|list }} {{ 'ab'|list }}",
    # tests
    "{{ n is defined }} {{ zz is defined }} {{ zz is undefined }} {{ none is none }} {{ 'a' is string }} {{ d is mapping }} {{ l is iterable }} {{ 'a' is iterable }} {{ zz is iterable }}",
    "{{ n is number }} {{ n is integer }} {{ f is float }} {{ true is boolean }} {{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }}",
    "{{ n is eq 7 }} {{ n is equalto(8) }} {{ n is ne 7 }} {{ n is lt 8 }} {{ n is gt 8 }} {{ 'a' is in 'abc' }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ none is sameas none }}",
    "{{ n is not none }} {{ not n is none }} {{ zz is not defined and true }}",
    # string methods
    "[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '\\n\\nx\\n'.lstrip('\\n') }}]",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b \\t c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'x</think>y'.split('</think>')[-1] }} {{ '  a b  '.split(none, 1) }}",
    "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ 'a-b'.replace('-', '_') }}",
    "{{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ ', '.join(['a', 'b']) }} {{ 'añb'.find('b') }} {{ '123'.isdigit() }} {{ 'title case'.title() }}",
    "{{ \"it's 1st-rate (ǆemal) x\tY  <über>\"|title }}|{{ 'hello big world'.title() }}|{{ \"it's 1st\".title() }}",
    "{{ 'straße' is lower }} {{ 'ÉCOLE Ω' is upper }} {{ 'Éa' is lower }} {{ 'ǅ' is upper }} {{ 'ǅ' is lower }} {{ 'ⓐⓑ' is lower }} {{ 'ⒶⒷ 1' is upper }} {{ 'Ⅻ' is upper }} {{ 'ª' is lower }} {{ 'ªA' is upper }} {{ '🄰' is upper }} {{ 'ͅ' is lower }} {{ '123 ·' is lower }} {{ 'ǆ' is lower }} {{ s is lower }}",
    "{{ s|lower }} {{ 'grüne äpfel'|upper }} {{ 'élan'|capitalize }} {{ 'ÉCOLE ΑΒΓ'.lower() }} {{ 'ǆemal ªb 1st'.title() }} {{ 'ıi'.upper() }} {{ u8.upper() }}",
    "{{ '\\u3000 x \\u2028'.strip() }}|{{ '\\u00a0x\\u0085'.strip() }}|{{ s.split() }}",
    # globals
    "{{ raise_exception('custom failure') }}",
    "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M') }}",
    "{{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ range(3)|list }} {{ range(1, 4)|list }}",
    # errors (both sides must fail)
    "{{ zz.attr }}",
    "{{ zz + 1 }}",
    "{{ 1 + 'a' }}",
    "{{ 1 / 0 }}",
    "{{ none.x }}[{{ none.x is defined }}]",
    "{% set x = 1 %}{% set x.y = 2 %}",
    "{{ 'a' < 1 }}",
    "{% for a, b in l %}{% endfor %}",
    # more corners
    "{% filter upper %}shout {{ 'it' }}{% endfilter %}",
    "{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}",
    "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}",
    "  {% for x in l %}\n  {{ x }}\n  {% endfor %}\n",
    "{{ -0.0 }} {{ 1e16 }} {{ 1e15 }} {{ 123.456 }} {{ 2.0 ** 0.5 }} {{ 10 ** 20 // 10 ** 19 if false else 3 }}",
    "{{ \"double \\\" quoted\" }} {{ 'it''s' }}",
    "{{ d|first }} {{ 'abc'|last }} {{ d|list }} {{ {'x': 1}|items|list }} {{ l|map('string')|list }}",
    "{{ 'a' if n is odd else 'b' }} {{ n is divisibleby 7 and n is odd }}",
    "{% set x = [1, 'two', none] %}{{ x|tojson }} {{ x|string }} {{ x|join('|') }}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }} {% endfor %}",
    "{{ messages[0].content[1:] }}|{{ messages[0]['content'].strip()|length }}",
    "{{ 'x' ~ 1.0 ~ 2 }} {{ 3 * 'ab' }} {{ 7 % -3 }} {{ -7.5 // 2 }} {{ 7.5 % 2 }}",
    "{{ ns }}{% set ns = namespace(a=1) %}{{ ns.a }}{{ ns.b }}",
    "{% if messages|length > 2 and messages[-1].role == 'assistant' %}yes{% elif true %}no{% else %}never{% endif %}",
    "a{% if false %}\nno\n{% endif %}\nb\n{%- if true %} c {% endif -%}\n d",
    "{%- for x in l -%}\n{{ x }}\n{%- endfor -%}",
    "{{ [1, 2, 3][1:] }}{{ 'héllo'[1:3] }}{{ 'abc'[-1] }}{{ 'abc'[10] }}",
    "{{ (1, 'a', none) }} {{ (1,) }} {{ () }} {{ [(1, 2)] }}",
    "{{ 'a' in ['a', 'b'] }} {{ ('a', 1) in [('a', 1)] }} {{ 1 in [1.0] }} {{ none in [none] }}",
    "{{ true + 1 }} {{ true * 3 }} {{ 'x'|length + true }}",
    # Llama 2 / Mistral alternation check
    "{% for message in messages[1:] %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}{{ message.content }}{% endfor %}",
]


def render(src):
    try:
        return {"text": environment().from_string(src).render(**V)}
    except TemplateError as e:
        return {"error": str(e)}
    except Exception as e:  # jinja2's own errors (TypeError, ZeroDivisionError, ...)
        return {"error": type(e).__name__ + ": " + str(e)}


def main():
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "chat", "jinja_cases.json")
    results = [{"template": c, "expect": render(c)} for c in CASES]
    if "--write" in sys.argv:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"vars": V, "now": 1764633600, "cases": results}, f, ensure_ascii=False,
                      indent=1)
            f.write("\n")
        print(f"jinja_cases: {len(results)} cases written to {path}")
        return 0
    stored = json.load(open(path, encoding="utf-8"))["cases"]
    bad = 0
    for s, r in zip(stored, results):
        if s != r:
            print(f"FAIL {s['template']!r}: stored {s['expect']}, jinja2 {r['expect']}")
            bad += 1
    if len(stored) != len(results):
        print("FAIL: the stored cases are not this script's (run with --write)")
        bad += 1
    print(f"jinja_cases: {len(results)} cases checked against jinja2, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
