"""The declared unit table of final answers: each unit's spellings, and what in a task
licenses it. A unit word in an answer is dropped only where the expected answer or the
question has that unit (`licensed`); any other word is read by the answer grammar
(`answer_grammar.py`), never taken for a unit."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    name: str
    dimension: str  # a unit may be written where the task fixes no other unit of its dimension
    spellings: tuple[str, ...]
    licensed_by: str = ""  # a regex over the task's topic that licenses the unit where it names none of its dimension
    marks: str = ""  # a regex of the unit's symbols in a task (`°`, `€`): they spell it


_MONEY = r"\\?\$\s*\d|\bcosts?\b|\bprice|\bpaid\b|\bpay|\bspen[dt]"  # a question about money
UNITS: tuple[Unit, ...] = (
    Unit("metre", "length", ("m", "meter", "meters", "metre", "metres")),
    Unit("centimetre", "length", ("cm", "centimeter", "centimeters", "centimetre", "centimetres")),
    Unit("millimetre", "length", ("mm", "millimeter", "millimeters", "millimetre", "millimetres")),
    Unit("kilometre", "length", ("km", "kilometer", "kilometers", "kilometre", "kilometres")),
    Unit("inch", "length", ("inch", "inches")),
    Unit("foot", "length", ("ft", "foot", "feet")),
    Unit("yard", "length", ("yd", "yds", "yard", "yards")),
    Unit("mile", "length", ("mi", "mile", "miles")),
    Unit("gram", "mass", ("g", "gram", "grams")),
    Unit("kilogram", "mass", ("kg", "kilogram", "kilograms", "kilo", "kilos")),
    Unit("milligram", "mass", ("mg", "milligram", "milligrams")),
    Unit("pound", "mass", ("lb", "lbs", "pound", "pounds")),
    Unit("ounce", "mass", ("oz", "ounce", "ounces")),
    Unit("ton", "mass", ("ton", "tons", "tonne", "tonnes")),
    Unit("second", "time", ("s", "sec", "secs", "second", "seconds")),
    Unit("minute", "time", ("min", "mins", "minute", "minutes")),
    Unit("hour", "time", ("h", "hr", "hrs", "hour", "hours")),
    Unit("day", "time", ("day", "days")),
    Unit("week", "time", ("week", "weeks")),
    Unit("month", "time", ("month", "months")),
    Unit("year", "time", ("yr", "yrs", "year", "years")),
    Unit("litre", "volume", ("l", "L", "liter", "liters", "litre", "litres")),
    Unit("millilitre", "volume", ("ml", "mL", "milliliter", "milliliters", "millilitre", "millilitres")),
    Unit("gallon", "volume", ("gal", "gallon", "gallons")),
    Unit("cup", "volume", ("cup", "cups")),
    Unit("speed", "speed", ("mph", "kph", "kmh")),
    Unit("degree", "angle", ("deg", "degree", "degrees"), r"angle", r"°|\\circ"),
    Unit("radian", "angle", ("rad", "radian", "radians"), r"angle"),
    Unit("celsius", "temperature", ("C", "celsius", "Celsius"), r"temperature", r"°\s*C"),
    Unit("fahrenheit", "temperature", ("F", "fahrenheit", "Fahrenheit"), r"temperature", r"°\s*F"),
    Unit("kelvin", "temperature", ("K", "kelvin", "Kelvin"), r"temperature"),
    Unit(
        "dollar",
        "money",
        ("dollar", "dollars", "usd", "USD"),
        r"\bcosts?\b|\bprice|\bpaid\b|\bpay|\bspen[dt]",
        r"\\?\$\s*\d",
    ),
    Unit("cent", "money", ("cent", "cents", "¢")),
    Unit("euro", "money", ("euro", "euros", "eur", "EUR"), "", r"€|\\euro\b"),
    Unit("pound sterling", "money", ("GBP", "sterling"), "", r"£|\\pounds\b"),
    Unit("yen", "money", ("yen", "JPY"), "", r"¥"),
    Unit("volt", "voltage", ("V", "volt", "volts")),
    Unit("ampere", "current", ("A", "amp", "amps", "ampere", "amperes")),
    Unit("watt", "power", ("W", "watt", "watts", "kW", "kilowatt", "kilowatts")),
    Unit("joule", "energy", ("J", "joule", "joules", "kJ")),
    Unit("newton", "force", ("N", "newton", "newtons")),
    Unit("pascal", "pressure", ("Pa", "pascal", "pascals", "kPa")),
    Unit("hertz", "frequency", ("Hz", "hertz")),
    Unit("ohm", "resistance", ("ohm", "ohms", "Ω")),
    Unit("byte", "data", ("B", "byte", "bytes", "KB", "MB", "GB", "bit", "bits")),
    Unit("unit", "unit", ("unit", "units")),
)
AREA_PREFIX = r"(?:square|sq\.?|cubic|cu\.?)\s+"  # `square metres`: part of the unit, not an operation


def unit_of(word: str) -> Unit | None:
    """The unit a word spells, or None."""
    return next((u for u in UNITS if word in u.spellings or word.lower() in u.spellings), None)


def _spelled(spelling: str, text: str) -> bool:
    """A spelling of a unit in a task: a long one as a word; a short one (`m`, `cm`) as a
    unit, after a number, in brackets, or after "in"."""
    word = re.escape(spelling)
    if len(spelling) > 2:
        return bool(re.search(rf"(?<![A-Za-z]){word}(?![A-Za-z])", text, re.IGNORECASE))
    return bool(re.search(rf"(?:\d\s*|\(\s*|\bin\s+|\\[a-z]+\{{\s*){word}(?![A-Za-z])", text))


def licensed(gold: str, question: str | None) -> tuple[Unit, ...]:
    """The units the expected answer or the question has: spelled or marked (`°`, `€`), or
    named by its topic (`angle`, `temperature`) where no unit of its dimension is spelled
    (an angle "in degrees" licenses no radian, a temperature in Celsius no kelvin)."""
    task = f"{gold}\n{question or ''}"
    spelled = tuple(
        u for u in UNITS if any(_spelled(s, task) for s in u.spellings) or (u.marks and re.search(u.marks, task))
    )
    fixed = {u.dimension for u in spelled}
    topical = tuple(
        u
        for u in UNITS
        if u not in spelled and u.dimension not in fixed and u.licensed_by and re.search(u.licensed_by, task, re.I)
    )
    return spelled + topical


def allowed(gold: str, question: str | None) -> tuple[Unit, ...]:
    """The units an answer may carry: those the task has, and those of a dimension for which
    the task has no unit (`60 km` where nothing fixes a length unit; never `60 cents` where
    the task is in dollars, nor `60 seconds` where it asks for minutes)."""
    named = licensed(gold, question)
    fixed = {u.dimension for u in named}
    return named + tuple(u for u in UNITS if u.dimension not in fixed and u not in named)


def unit_pattern(units: tuple[Unit, ...], named: tuple[Unit, ...] = ()) -> re.Pattern | None:
    """A unit expression of `units` after a number (`km/h`, `cm^2`, `square feet`, `m/s^2`), or
    None where there are none. A spelling of one or two letters is a unit only right after a
    digit (`60 m`, `5 cm`; elsewhere `F_k` is a variable), or after `/` in a compound (`km/h`)."""
    spellings = sorted({s for u in units + named for s in u.spellings}, key=len, reverse=True)
    if not spellings:
        return None
    long_names = "|".join(re.escape(s) for s in spellings if len(s) > 2) or "(?!)"
    short_names = "|".join(re.escape(s) for s in spellings if len(s) <= 2) or "(?!)"
    power = r"(?![A-Za-z])(?:\s*\^\s*\{?-?\d\}?|[²³])?"
    one = rf"(?:{AREA_PREFIX})?(?:{long_names}|{short_names}){power}"
    first = (
        rf"(?:(?<=[\d}})\]])\s*(?:{AREA_PREFIX})?(?:{long_names})|(?<=\d)\s*(?:{AREA_PREFIX})?(?:{short_names})){power}"
    )
    return re.compile(rf"{first}(?:\s*(?:/|\bper\b|\\cdot|·|\*)\s*{one})*")
