"""World-time calendar arithmetic (spec 000 overview: advance-world-time "工具计算历法差值").

A definition is the world's `contract:world.time-definition@1` object (`{kind: calendar|phases,
...}`). A clock position is one integer `tick` in the definition's base unit: minutes for
`calendar`, phases for `phases`. Tick 0 is year 0 / month 1 / day 1 00:00 (cycle 0, phase 0);
years may be negative. Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CALENDAR = "calendar"
PHASES = "phases"
CALENDAR_UNITS = ("minute", "hour", "day")
PHASE_UNITS = ("phase", "cycle")
_ZH_NUM = "零一二三四五六七八九十"


def text_pick(value: Any, locale: str) -> str:
    """A plain string, or the best entry of a `{locale: text}` record (exact, language, en, first)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value:
        language = locale.split("-")[0]
        for key in (locale, language, "en-US", "en"):
            if isinstance(value.get(key), str):
                return value[key]
        for key, text in value.items():
            if key.split("-")[0] == language and isinstance(text, str):
                return text
        return str(next(iter(value.values())))
    return ""


@dataclass(frozen=True)
class Calendar:
    """The arithmetic view of one definition."""

    definition: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.definition.get("kind", CALENDAR)

    @property
    def base_unit(self) -> str:
        return "minute" if self.kind == CALENDAR else "phase"

    @property
    def units(self) -> tuple[str, ...]:
        return CALENDAR_UNITS if self.kind == CALENDAR else PHASE_UNITS

    # -- calendar constants
    def _cal(self) -> dict[str, Any]:
        return self.definition.get("calendar") or {}

    @property
    def minutes_per_hour(self) -> int:
        return int(self._cal().get("minutesPerHour", 60))

    @property
    def hours_per_day(self) -> int:
        return int(self._cal().get("hoursPerDay", 24))

    @property
    def months(self) -> list[dict[str, Any]]:
        return list(self._cal().get("months") or [{"name": "", "days": 30}])

    @property
    def days_per_year(self) -> int:
        return sum(int(m["days"]) for m in self.months)

    @property
    def phase_count(self) -> int:
        return len(self.definition.get("phases") or [""])

    def unit_ticks(self, unit: str) -> int:
        """Base ticks in one `unit` (minute/hour/day or phase/cycle). KeyError for other units."""
        table = {
            "minute": 1,
            "hour": self.minutes_per_hour,
            "day": self.minutes_per_hour * self.hours_per_day,
            "phase": 1,
            "cycle": self.phase_count,
        }
        if unit not in self.units:
            raise KeyError(unit)
        return table[unit]

    # -- positions
    def tick_of(self, parts: dict[str, Any]) -> int:
        """Tick of `{year, month, day, hour, minute}` or `{cycle, phase}`. ValueError when a part
        is out of range for this calendar."""
        if self.kind == PHASES:
            phase = int(parts.get("phase", 0))
            if not 0 <= phase < self.phase_count:
                raise ValueError(f"phase must be in [0, {self.phase_count - 1}]")
            return int(parts.get("cycle", 0)) * self.phase_count + phase
        months = self.months
        month = int(parts.get("month", 1))
        if not 1 <= month <= len(months):
            raise ValueError(f"month must be in [1, {len(months)}]")
        day = int(parts.get("day", 1))
        if not 1 <= day <= int(months[month - 1]["days"]):
            raise ValueError(f"day must be in [1, {months[month - 1]['days']}] for month {month}")
        hour = int(parts.get("hour", 0))
        if not 0 <= hour < self.hours_per_day:
            raise ValueError(f"hour must be in [0, {self.hours_per_day - 1}]")
        minute = int(parts.get("minute", 0))
        if not 0 <= minute < self.minutes_per_hour:
            raise ValueError(f"minute must be in [0, {self.minutes_per_hour - 1}]")
        day_of_year = sum(int(m["days"]) for m in months[: month - 1]) + day - 1
        days = int(parts.get("year", 0)) * self.days_per_year + day_of_year
        return (days * self.hours_per_day + hour) * self.minutes_per_hour + minute

    def parts_of(self, tick: int) -> dict[str, int]:
        """Inverse of tick_of."""
        if self.kind == PHASES:
            cycle, phase = divmod(tick, self.phase_count)
            return {"cycle": cycle, "phase": phase}
        total_hours, minute = divmod(tick, self.minutes_per_hour)
        days, hour = divmod(total_hours, self.hours_per_day)
        year, day_of_year = divmod(days, self.days_per_year)
        month = 1
        for m in self.months:
            if day_of_year < int(m["days"]):
                break
            day_of_year -= int(m["days"])
            month += 1
        return {"year": year, "month": month, "day": day_of_year + 1, "hour": hour, "minute": minute}

    def initial_tick(self) -> int:
        return self.tick_of(self.definition.get("initial") or {})

    def label(self, tick: int, locale: str) -> str:
        """Readable position in the locale, e.g. "景和7年正月12日 寅时（2:00）" /
        "November 14, A.D. 1891, 17:40 (Dusk)"."""
        parts = self.parts_of(tick)
        is_zh = locale.lower().startswith("zh")
        if self.kind == PHASES:
            phases = self.definition.get("phases") or [""]
            phase = text_pick(phases[parts["phase"]], locale)
            cycle_label = text_pick(self.definition.get("cycleLabel") or "", locale)
            if is_zh:
                return f"第{parts['cycle']}{cycle_label or '轮'}・{phase}"
            return f"{cycle_label or 'Cycle'} {parts['cycle']}, {phase}"
        cal = self._cal()
        era = text_pick(cal.get("era") or "", locale)
        month = text_pick(self.months[parts["month"] - 1]["name"], locale)
        period = ""
        for p in sorted(cal.get("periods") or [], key=lambda p: p["startHour"]):
            if p["startHour"] <= parts["hour"]:
                period = text_pick(p["name"], locale)
        if self.hours_per_day != 24 or self.minutes_per_hour != 60:
            # The world's own day (e.g. 12 shichen of 8 ke): a 24-hour "2:00" would lie, so the
            # label is the period and the part-hours within it (寅时 / 寅时三刻; "Hour 3, mark 2/8").
            if is_zh:
                ke = f"{_ZH_NUM[parts['minute']] if parts['minute'] < len(_ZH_NUM) else parts['minute']}刻" if parts["minute"] else ""
                hour_name = period or f"第{parts['hour'] + 1}时"
                return f"{era}{parts['year']}年{month}{parts['day']}日 {hour_name}{ke}"
            text = f"{month} {parts['day']}, {era} {parts['year']}".replace(",  ", ", ").strip()
            hour_name = period or f"hour {parts['hour'] + 1} of {self.hours_per_day}"
            mark = f", mark {parts['minute']} of {self.minutes_per_hour}" if parts["minute"] else ""
            return f"{text}, {hour_name}{mark}"
        clock = f"{parts['hour']}:{parts['minute']:02d}"
        if is_zh:
            return f"{era}{parts['year']}年{month}{parts['day']}日 {period}（{clock}）".replace(" （", "（")
        text = f"{month} {parts['day']}, {era} {parts['year']}".replace(",  ", ", ").strip()
        return f"{text}, {clock}" + (f" ({period})" if period else "")

    def duration_text(self, ticks: int, locale: str) -> str:
        """|ticks| as "1 day 2 hours 5 minutes" / "1天2小时5分钟" (phases: "3 phases" / "3个阶段")."""
        ticks = abs(ticks)
        is_zh = locale.lower().startswith("zh")
        if self.kind == PHASES:
            return f"{ticks}个阶段" if is_zh else f"{ticks} phase{'s' if ticks != 1 else ''}"
        per_day = self.unit_ticks("day")
        days, rest = divmod(ticks, per_day)
        hours, minutes = divmod(rest, self.minutes_per_hour)
        if is_zh and self.hours_per_day == 12 and self.minutes_per_hour == 8:  # 时辰 and 刻
            out = (f"{days}天" if days else "") + (f"{hours}个时辰" if hours else "") + (f"{minutes}刻" if minutes else "")
            return out or "0刻"
        if is_zh:
            out = (f"{days}天" if days else "") + (f"{hours}小时" if hours else "") + (f"{minutes}分钟" if minutes else "")
            return out or "0分钟"
        chunks = []
        for amount, word in ((days, "day"), (hours, "hour"), (minutes, "minute")):
            if amount:
                chunks.append(f"{amount} {word}{'s' if amount != 1 else ''}")
        return " ".join(chunks) or "0 minutes"
